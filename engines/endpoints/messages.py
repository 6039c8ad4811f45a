"""/v1/messages, Anthropic's Messages API: one user message in (text, and base64 image blocks
when the request has images), typed events out. The key travels as `x-api-key`, with an
`anthropic-version` header (`engine.anthropic_version`).

The stream's events (`event: <type>` then `data: {"type": <type>, ...}`):

    message_start        {"message": {"usage": {"input_tokens": N, ...}}}
    content_block_delta  {"delta": {"type": "text_delta", "text"}}: an answer token;
                         {"delta": {"type": "thinking_delta", "thinking"}}: a reasoning token
    message_delta        {"delta": {"stop_reason"}, "usage": {"output_tokens": N}} (cumulative)
    message_stop         the end
    error                {"error": {"type", "message"}}: the request fails with its message

content_block_start/stop, ping and signature deltas carry no token.
"""

from __future__ import annotations

import base64
from typing import Any

from engines.base import Request
from engines.endpoints.base import Endpoint, OnEvent, check_error, image_mime
from engines.endpoints.responses import openai_usage
from engines.openai_stream import StreamState

STOP_REASONS = {"max_tokens": "length"}  # every other stop_reason (end_turn, stop_sequence, ...) is "stop"


class Messages(Endpoint):
    path = "messages"

    def body(self, request: Request) -> dict[str, Any]:
        s = request.sampling
        text = self.prompt_text(request)
        content: str | list[dict[str, Any]] = text
        if request.images:  # images first, as Anthropic's guide has them
            content = [{"type": "image", "source": {
                "type": "base64", "media_type": image_mime(image),
                "data": base64.b64encode(image).decode("ascii")}} for image in request.images]
            content.append({"type": "text", "text": text})
        body: dict[str, Any] = {"model": self.model, "max_tokens": request.max_tokens,
                                "messages": [{"role": "user", "content": content}],
                                "temperature": s.temperature, "stream": self.stream}
        top_p = self.sampling.get("top_p", s.top_p)
        if top_p != 1.0:
            body["top_p"] = top_p
        if s.top_k:
            body["top_k"] = s.top_k
        if s.ignore_eos:
            body["ignore_eos"] = True  # vLLM and llmperf-serve honour it; scenario.ignore_eos=false for Anthropic's own API
        for key, value in self.sampling.items():
            if key != "top_p":
                body["stop_sequences" if key == "stop" else key] = value
        return self.finish(body)

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": self.opts.anthropic_version}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def parser(self, state: StreamState) -> OnEvent:
        def on_event(event: dict[str, Any], now: float, ids: Any) -> list:
            kind = event.get("type")
            if kind == "content_block_delta":
                delta = event.get("delta") or {}
                if delta.get("type") == "text_delta":
                    return [state.token(delta.get("text") or "", now, ids)]
                if delta.get("type") == "thinking_delta":
                    return [state.token(delta.get("thinking") or "", now, ids, reasoning=True)]
            elif kind == "message_start":
                usage = (event.get("message") or {}).get("usage") or {}
                state.usage = openai_usage(usage.get("input_tokens"), None, usage)
            elif kind == "message_delta":
                add_usage(state, event.get("usage") or {})
                reason = (event.get("delta") or {}).get("stop_reason")
                if reason:
                    state.finish_reason = STOP_REASONS.get(reason, "stop")
            elif kind == "message_stop":
                state.done = True
                state.finish_reason = state.finish_reason or "stop"
            elif kind == "error":
                check_error(event, "error event")
            return []

        return on_event

    def on_whole(self, state: StreamState, body: dict[str, Any], now: float) -> None:
        check_error(body, "error body")
        for block in body.get("content") or ():
            state.texts.append(block.get("thinking") or block.get("text") or "")
        state.usage = {}
        add_usage(state, body.get("usage") or {})
        state.finish_reason = STOP_REASONS.get(body.get("stop_reason"), "stop")
        state.done = True


def add_usage(state: StreamState, usage: dict[str, Any]) -> None:
    """message_delta's counts: output_tokens (cumulative), and input_tokens where a server repeats it."""
    merged = dict(state.usage or {})
    merged.update(openai_usage(usage.get("input_tokens"), usage.get("output_tokens"), usage))
    state.usage = merged
