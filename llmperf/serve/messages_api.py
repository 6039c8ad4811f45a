"""Anthropic's Messages API (`POST /v1/messages`): the request parsed into a `GenerationSpec`,
and the response as typed events (streamed) or one message (whole).

Streamed, each event is `event: <type>` and `data: {"type": <type>, ...}`: message_start (the
usage's input_tokens; the images' in `image_tokens`, a field of llmperf-serve's), per content
block (a thinking block for reasoning tokens, a text block for the answer)
content_block_start, one content_block_delta per engine event (`thinking_delta` or
`text_delta`) and content_block_stop; then message_delta (stop_reason "end_turn", or
"max_tokens" when max_tokens cut it, and the usage's output_tokens) and message_stop. A
failure after the headers is an `error` event.
"""

from __future__ import annotations

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
from llmperf.serve.responses_api import sse_event

ANTHROPIC_VERSION = "2023-06-01"


def parse_messages(body: dict, served_model: str, tokenizer: Tokenizer, limits: Limits,
                   render_chat: Callable[[list[dict[str, str]]], str]) -> GenerationSpec:
    model = check_model(body, served_model)
    max_tokens = _int_field(body, "max_tokens", None)
    if max_tokens is None:
        raise OpenAIError("max_tokens: Field required", param="max_tokens")
    messages, num_image_tokens = chat_messages(body.get("messages"))
    if body.get("system") is not None:
        text, _ = content_text(body["system"], "system")
        messages.insert(0, {"role": "system", "content": text})
    if body.get("stop_sequences"):
        raise OpenAIError("stop_sequences are not supported; use stop_token_ids", param="stop_sequences")
    ids = [IMAGE_TOKEN_ID] * num_image_tokens + tokenizer.encode(render_chat(messages))
    fields = {k: v for k, v in body.items() if k not in ("n", "best_of", "stream_options")}
    spec = generation_spec(fields, "messages", model, ids, max_tokens, "messages", limits)
    spec.include_usage, spec.image_tokens = spec.stream, num_image_tokens
    return spec


class MessagesShapes:
    """One message's events and its whole object."""

    def __init__(self, spec: GenerationSpec, response_id: str):
        self.spec = spec
        self.id = response_id
        self.blocks: list[dict[str, Any]] = []  # content blocks so far, the last one open
        self.open = False

    def opening(self, num_prompt_tokens: int) -> bytes:
        message = self.message(None, num_prompt_tokens, 0)
        return sse_event({"type": "message_start", "message": message})

    def piece(self, text: str, reasoning: bool, carries_token: bool) -> bytes:
        if not carries_token and not text:
            return b""
        kind = "thinking" if reasoning else "text"
        out = b""
        if not self.open or self.blocks[-1]["type"] != kind:
            out += self._stop_block()
            self.blocks.append({"type": kind, kind: ""} | ({"signature": ""} if reasoning else {}))
            self.open = True
            out += sse_event({"type": "content_block_start", "index": len(self.blocks) - 1,
                              "content_block": dict(self.blocks[-1])})
        self.blocks[-1][kind] += text
        delta = {"type": "thinking_delta", "thinking": text} if reasoning else {"type": "text_delta", "text": text}
        return out + sse_event({"type": "content_block_delta", "index": len(self.blocks) - 1, "delta": delta})

    def closing(self, num_prompt_tokens: int, num_output_tokens: int, finish_reason: str | None) -> bytes:
        delta = {"stop_reason": _stop_reason(finish_reason), "stop_sequence": None}
        return (self._stop_block()
                + sse_event({"type": "message_delta", "delta": delta,
                             "usage": {"output_tokens": num_output_tokens}})
                + sse_event({"type": "message_stop"}))

    def error(self, err: OpenAIError) -> bytes:
        kind = "invalid_request_error" if err.status < 500 else "api_error"
        return sse_event({"type": "error", "error": {"type": kind, "message": err.message}})

    def whole(self, choice: Choice, num_prompt_tokens: int, num_output_tokens: int) -> dict[str, Any]:
        if choice.reasoning:
            self.blocks.append({"type": "thinking", "thinking": choice.reasoning, "signature": ""})
        self.blocks.append({"type": "text", "text": choice.text})
        return self.message(_stop_reason(choice.finish_reason), num_prompt_tokens, num_output_tokens)

    def message(self, stop_reason: str | None, num_prompt_tokens: int, num_output_tokens: int) -> dict[str, Any]:
        usage: dict[str, Any] = {"input_tokens": num_prompt_tokens, "output_tokens": num_output_tokens}
        if self.spec.image_tokens:
            usage["image_tokens"] = self.spec.image_tokens
        return {"id": self.id, "type": "message", "role": "assistant", "model": self.spec.model,
                "content": list(self.blocks), "stop_reason": stop_reason, "stop_sequence": None,
                "usage": usage}

    def _stop_block(self) -> bytes:
        if not self.open:
            return b""
        self.open = False
        return sse_event({"type": "content_block_stop", "index": len(self.blocks) - 1})


def _stop_reason(finish_reason: str | None) -> str:
    return "max_tokens" if finish_reason == "length" else "end_turn"
