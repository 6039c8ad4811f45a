"""/v1/responses, OpenAI's Responses API: `input` in (text, or a user message with input_text
and input_image parts), typed events out.

The stream's events (`data: {"type": ...}`) that matter here:

    response.output_text.delta       {"delta": "text"}: an answer token
    response.reasoning_text.delta    {"delta": "text"}: a reasoning token (also the older
    response.reasoning.delta, and    response.reasoning_summary_text.delta)
    response.completed               {"response": {"usage": {"input_tokens", "output_tokens"}}}
    response.incomplete              the same, cut short (max_output_tokens: finish "length")
    response.failed, error           the request fails with the server's message

Everything else (created, in_progress, output_item.added, content_part.done, ...) carries no
token. The stream has no `[DONE]`: `response.completed` ends it.
"""

from __future__ import annotations

from typing import Any

from engines.base import Request
from engines.endpoints.base import Endpoint, OnEvent, check_error, data_uri
from engines.openai_stream import ServerError, StreamState

TEXT_DELTAS = ("response.output_text.delta",)
REASONING_DELTAS = ("response.reasoning_text.delta", "response.reasoning.delta",
                    "response.reasoning_summary_text.delta")
ENDS = ("response.completed", "response.incomplete")


class Responses(Endpoint):
    path = "responses"

    def body(self, request: Request) -> dict[str, Any]:
        s = request.sampling
        text = self.prompt_text(request)
        body: dict[str, Any] = {"model": self.model, "input": text}
        if request.images:
            body["input"] = [{"role": "user", "content": [{"type": "input_text", "text": text}] + [
                {"type": "input_image", "image_url": data_uri(image)} for image in request.images]}]
        body.update(max_output_tokens=request.max_tokens, temperature=s.temperature,
                    top_p=self.sampling.get("top_p", s.top_p), stream=self.stream)
        if s.top_k:
            body["top_k"] = s.top_k
        if s.seed is not None:
            body["seed"] = s.seed
        if s.ignore_eos:
            body["ignore_eos"] = True  # vLLM and llmperf-serve honour it
        if s.stop_token_ids:
            body["stop_token_ids"] = list(s.stop_token_ids)
        body.update((k, v) for k, v in self.sampling.items() if k != "top_p")
        return self.finish(body)

    def parser(self, state: StreamState) -> OnEvent:
        def on_event(event: dict[str, Any], now: float, ids: Any) -> list:
            kind = event.get("type")
            if kind in TEXT_DELTAS:
                return [state.token(event.get("delta") or "", now, ids)]
            if kind in REASONING_DELTAS:
                return [state.token(event.get("delta") or "", now, ids, reasoning=True)]
            if kind in ENDS:
                end(state, event.get("response") or {})
            elif kind == "response.failed":
                raise ServerError(f"response.failed: {failure(event.get('response') or {})}")
            elif kind == "error":
                check_error(event, "error event")
            return []

        return on_event

    def on_whole(self, state: StreamState, body: dict[str, Any], now: float) -> None:
        check_error(body, "error body")
        if body.get("status") == "failed":
            raise ServerError(f"response failed: {failure(body)}")
        for item in body.get("output") or ():
            parts = (item.get("content") or []) + (item.get("summary") or [])
            state.texts.extend(part.get("text") or "" for part in parts)
        end(state, body)


def end(state: StreamState, response: dict[str, Any]) -> None:
    """The response's usage and how it ended."""
    usage = response.get("usage") or {}
    if usage:
        state.usage = openai_usage(usage.get("input_tokens"), usage.get("output_tokens"),
                                   usage.get("input_tokens_details"))
    reason = (response.get("incomplete_details") or {}).get("reason")
    state.finish_reason = "length" if reason == "max_output_tokens" else "stop"
    state.done = True


def openai_usage(prompt_tokens: Any, output_tokens: Any, details: Any = None) -> dict[str, Any]:
    """Another API's usage in the completions' shape that the engine reads."""
    out = {"prompt_tokens": prompt_tokens, "completion_tokens": output_tokens}
    image_tokens = (details or {}).get("image_tokens")
    if image_tokens is not None:
        out["image_tokens"] = image_tokens
    return {k: v for k, v in out.items() if v is not None}


def failure(response: dict[str, Any]) -> str:
    error = response.get("error") or {}
    return str(error.get("message") or error or "no reason given")
