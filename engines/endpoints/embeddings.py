"""/v1/embeddings: one body per request, no output tokens."""

from __future__ import annotations

from typing import Any

from engines.base import Request
from engines.endpoints.base import Endpoint, OnEvent, check_error
from engines.openai_stream import ServerError, StreamState


class Embeddings(Endpoint):
    path = "embeddings"
    streams = False
    whole_kind = "embedding"
    has_output = False

    def body(self, request: Request) -> dict[str, Any]:
        body = {"model": self.model, "input": self.prompt(request), "encoding_format": "float"}
        return self.finish(body)

    def parser(self, state: StreamState) -> OnEvent:
        raise ServerError("an embedding does not stream")

    def on_whole(self, state: StreamState, body: dict[str, Any], now: float) -> None:
        check_error(body, "error body")
        state.usage = body.get("usage") or None
        state.done = True
        data = body.get("data") or []
        if not data or not isinstance(data[0].get("embedding"), list):
            raise ServerError("the response holds no embedding")
