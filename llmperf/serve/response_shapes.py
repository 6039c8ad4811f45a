"""The OpenAI wire format's response side: usage, the JSON objects of one request's response,
streamed (chunks) or whole, and the server-sent event that carries each
(llmperf/serve/protocol.py parses the requests)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from llmperf.serve.protocol import GenerationSpec


def usage(num_prompt_tokens: int, num_output_tokens: int, image_tokens: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {
        "prompt_tokens": num_prompt_tokens,
        "completion_tokens": num_output_tokens,
        "total_tokens": num_prompt_tokens + num_output_tokens,
    }
    if image_tokens:  # of prompt_tokens; the field only when the prompt held images
        out["prompt_tokens_details"] = {"image_tokens": image_tokens}
    return out


class ResponseShapes:
    """The JSON objects of one request's response, streamed (chunks) or whole."""

    def __init__(self, spec: GenerationSpec, response_id: str):
        self.spec = spec
        self.id = response_id
        self.created = int(time.time())
        self._roles_sent: set[int] = set()

    def chunks(
        self, text: str, finish_reason: str | None, index: int = 0, reasoning: bool = False
    ) -> list[dict[str, Any]]:
        """The chunks for one token of choice `index`. Chat opens, as OpenAI does, with a chunk
        announcing the role (per choice); it is sent with the choice's first token, so it
        cannot pass for an early first token. Reasoning tokens travel in chat deltas'
        `reasoning_content`, as vLLM's reasoning parsers send them; completions have no
        such field, so there they are text like any other."""
        if self.spec.endpoint != "chat":
            choice = {"index": index, "text": text, "logprobs": None, "finish_reason": finish_reason}
            return [self._chunk("text_completion", choice)]
        out = []
        if index not in self._roles_sent:
            self._roles_sent.add(index)
            role = {
                "index": index,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
            out.append(self._chunk("chat.completion.chunk", role))
        # "content" always: each chunk is a token, even one without text
        delta = {"reasoning_content": text} if reasoning else {"content": text}
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        out.append(self._chunk("chat.completion.chunk", choice))
        return out

    def _chunk(self, obj: str, choice: dict[str, Any]) -> dict[str, Any]:
        out = {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.spec.model,
            "choices": [choice],
        }
        if self.spec.include_usage:
            out["usage"] = None
        return out

    def usage_chunk(self, num_prompt_tokens: int, num_output_tokens: int) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.spec.endpoint == "chat" else "text_completion"
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.spec.model,
            "choices": [],
            "usage": usage(num_prompt_tokens, num_output_tokens, self.spec.image_tokens),
        }

    def whole(self, choices: list[Choice], num_prompt_tokens: int, num_output_tokens: int) -> dict:
        if self.spec.endpoint == "chat":
            out = []
            for c in choices:
                message = {"role": "assistant", "content": c.text}
                if c.reasoning:
                    message["reasoning_content"] = c.reasoning
                out.append({"index": c.index, "message": message, "logprobs": None,
                            "finish_reason": c.finish_reason})
            obj = "chat.completion"
        else:
            out = [{"index": c.index, "text": c.reasoning + c.text, "logprobs": None,
                    "finish_reason": c.finish_reason} for c in choices]
            obj = "text_completion"
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.spec.model,
            "choices": out,
            "usage": usage(num_prompt_tokens, num_output_tokens, self.spec.image_tokens),
        }


@dataclass
class Choice:
    """One choice of a whole (non-streamed) response."""

    index: int
    text: str = ""
    reasoning: str = ""  # reasoning content, before the answer
    finish_reason: str | None = None


def sse(obj: dict[str, Any] | str) -> bytes:
    """One server-sent event: `data: <json>` and a blank line."""
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return f"data: {data}\n\n".encode()
