"""/v1/chat/completions: one user message in (text, and image content parts when the request
has images), `choices[].delta` chunks out (content, and reasoning_content or reasoning)."""

from __future__ import annotations

from typing import Any

from engines.base import Request
from engines.endpoints.base import Endpoint, OnEvent, data_uri
from engines.endpoints.completions import openai_sampling_body
from engines.openai_stream import StreamState


class Chat(Endpoint):
    path = "chat/completions"

    def body(self, request: Request) -> dict[str, Any]:
        body = openai_sampling_body(self, request)
        text = self.prompt_text(request)
        content: str | list[dict[str, Any]] = text
        if request.images:  # without images the content stays a string, as it always was
            content = [{"type": "text", "text": text}] + [
                {"type": "image_url", "image_url": {"url": data_uri(image)}} for image in request.images
            ]
        body["messages"] = [{"role": "user", "content": content}]
        return self.finish(body)

    def parser(self, state: StreamState) -> OnEvent:
        return state.on_chunk

    def on_whole(self, state: StreamState, body: dict[str, Any], now: float) -> None:
        state.on_whole(body, "chat", now)
