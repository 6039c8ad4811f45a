"""OpenAI's Responses API (`POST /v1/responses`): the request parsed into a `GenerationSpec`,
and the response as typed events (streamed) or one object (whole).

Streamed, each event is `event: <type>` and `data: {"type": <type>, ..., "sequence_number"}`:
response.created, response.in_progress, then per output item (a reasoning item for reasoning
tokens, a message item for the answer) output_item.added, content_part.added, one
`response.reasoning_text.delta` or `response.output_text.delta` per engine event,
content_part.done, output_item.done; last response.completed (response.incomplete when
max_output_tokens cut it) with the usage: input_tokens (images' in
input_tokens_details.image_tokens), output_tokens (reasoning's in
output_tokens_details.reasoning_tokens). A failure after the headers is an `error` event.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from engines.base import Tokenizer
from llmperf.serve.images import IMAGE_TOKEN_ID
from llmperf.serve.protocol import (
    GenerationSpec,
    Limits,
    OpenAIError,
    _int_field,
    chat_messages,
    check_model,
    content_text,
    generation_spec,
)
from llmperf.serve.response_shapes import Choice


def parse_responses(body: dict, served_model: str, tokenizer: Tokenizer, limits: Limits,
                    render_chat: Callable[[list[dict[str, str]]], str]) -> GenerationSpec:
    model = check_model(body, served_model)
    given = body.get("input")
    if isinstance(given, str):
        messages, num_image_tokens = [{"role": "user", "content": given}], 0
    else:
        messages, num_image_tokens = chat_messages(given, "input")
    instructions = body.get("instructions")
    if instructions is not None:
        text, _ = content_text(instructions, "instructions")
        messages.insert(0, {"role": "system", "content": text})
    ids = [IMAGE_TOKEN_ID] * num_image_tokens + tokenizer.encode(render_chat(messages))
    max_tokens = _int_field(body, "max_output_tokens", None)
    if max_tokens is None:
        max_tokens = max(1, limits.max_context_tokens - len(ids))
    fields = {k: v for k, v in body.items() if k not in ("n", "best_of", "stream_options")}
    spec = generation_spec(fields, "responses", model, ids, max_tokens, "input", limits)
    spec.include_usage, spec.image_tokens = spec.stream, num_image_tokens
    return spec


def sse_event(obj: dict[str, Any]) -> bytes:
    return f"event: {obj['type']}\ndata: {json.dumps(obj, separators=(',', ':'))}\n\n".encode()


class ResponsesShapes:
    """One response's events and its whole object."""

    def __init__(self, spec: GenerationSpec, response_id: str):
        self.spec = spec
        self.id = response_id
        self.created = int(time.time())
        self.sequence = 0
        self.items: list[dict[str, Any]] = []  # the output items so far, the last one open
        self.open = False
        self.num_reasoning = 0

    def _event(self, kind: str, **fields: Any) -> bytes:
        event = sse_event({"type": kind, **fields, "sequence_number": self.sequence})
        self.sequence += 1
        return event

    def opening(self, num_prompt_tokens: int) -> bytes:
        response = self.response("in_progress", None, None)
        return self._event("response.created", response=response) + self._event(
            "response.in_progress", response=response)

    def piece(self, text: str, reasoning: bool, carries_token: bool) -> bytes:
        if not carries_token and not text:
            return b""
        kind = "reasoning" if reasoning else "message"
        out = b""
        if not self.open or self.items[-1]["type"] != kind:
            out += self._close_item() + self._open_item(kind)
        part = self.items[-1]["content"][0]
        part["text"] += text
        index = len(self.items) - 1
        item_id = self.items[-1]["id"]
        if reasoning:
            self.num_reasoning += 1
            return out + self._event("response.reasoning_text.delta", item_id=item_id,
                                     output_index=index, content_index=0, delta=text)
        return out + self._event("response.output_text.delta", item_id=item_id, output_index=index,
                                 content_index=0, delta=text, logprobs=[])

    def closing(self, num_prompt_tokens: int, num_output_tokens: int, finish_reason: str | None) -> bytes:
        response = self.response(_status(finish_reason), num_prompt_tokens, num_output_tokens)
        kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
        return self._close_item() + self._event(kind, response=response)

    def error(self, err: OpenAIError) -> bytes:
        return self._event("error", code=err.code or err.type, message=err.message, param=err.param)

    def whole(self, choice: Choice, num_prompt_tokens: int, num_output_tokens: int) -> dict[str, Any]:
        if choice.reasoning:
            self.items.append(_item("reasoning", f"rs_{self.id}_0", choice.reasoning))
        self.items.append(_item("message", f"msg_{self.id}_{len(self.items)}", choice.text))
        return self.response(_status(choice.finish_reason), num_prompt_tokens, num_output_tokens)

    def response(self, status: str, num_prompt_tokens: int | None,
                 num_output_tokens: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id, "object": "response", "created_at": self.created, "model": self.spec.model,
            "status": status, "output": [dict(item, status="completed") for item in self.items],
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "error": None, "max_output_tokens": self.spec.max_tokens,
            "temperature": self.spec.sampling.temperature, "top_p": self.spec.sampling.top_p,
            "usage": None,
        }
        if num_prompt_tokens is not None:
            details = {"cached_tokens": 0}
            if self.spec.image_tokens:  # llmperf-serve's field, only when the input held images
                details["image_tokens"] = self.spec.image_tokens
            out["usage"] = {
                "input_tokens": num_prompt_tokens,
                "input_tokens_details": details,
                "output_tokens": num_output_tokens,
                "output_tokens_details": {"reasoning_tokens": self.num_reasoning},
                "total_tokens": num_prompt_tokens + num_output_tokens,
            }
        return out

    def _open_item(self, kind: str) -> bytes:
        item = _item(kind, f"{'rs' if kind == 'reasoning' else 'msg'}_{self.id}_{len(self.items)}", "")
        self.items.append(item)
        self.open = True
        index = len(self.items) - 1
        added = dict(item, status="in_progress", content=[])
        return self._event("response.output_item.added", output_index=index, item=added) + self._event(
            "response.content_part.added", item_id=item["id"], output_index=index, content_index=0,
            part=dict(item["content"][0]))

    def _close_item(self) -> bytes:
        if not self.open:
            return b""
        self.open = False
        item, index = self.items[-1], len(self.items) - 1
        part = item["content"][0]
        done = "response.reasoning_text.done" if item["type"] == "reasoning" else "response.output_text.done"
        return (self._event(done, item_id=item["id"], output_index=index, content_index=0, text=part["text"])
                + self._event("response.content_part.done", item_id=item["id"], output_index=index,
                              content_index=0, part=part)
                + self._event("response.output_item.done", output_index=index,
                              item=dict(item, status="completed")))


def _item(kind: str, item_id: str, text: str) -> dict[str, Any]:
    if kind == "reasoning":
        return {"type": "reasoning", "id": item_id, "summary": [],
                "content": [{"type": "reasoning_text", "text": text}]}
    return {"type": "message", "id": item_id, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def _status(finish_reason: str | None) -> str:
    return "incomplete" if finish_reason == "length" else "completed"
