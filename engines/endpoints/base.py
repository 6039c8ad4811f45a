"""What every endpoint shares: the prompt as text or ids, images as data URIs, the sampling
options a user set (sent only then), and the extra body merged last."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from engines.base import Request, TokenEvent, Tokenizer
from engines.openai_stream import ServerError, StreamState, error_message

# engine.* sampling options, by the name the OpenAI-style APIs give them
SAMPLING_OPTIONS = ("top_p", "top_k", "min_tokens", "stop", "seed", "presence_penalty",
                    "frequency_penalty")
OnEvent = Callable[[dict[str, Any], float, Any], list[TokenEvent]]


def image_mime(data: bytes) -> str:
    """The MIME type of an encoded image, from its magic bytes (PNG or JPEG)."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "image/png"
    if data[:2] == b"\xff\xd8":
        return "image/jpeg"
    raise ValueError("an image must be PNG or JPEG")


def data_uri(data: bytes) -> str:
    return f"data:{image_mime(data)};base64,{base64.b64encode(data).decode('ascii')}"


class Endpoint:
    """One API. Subclasses set `path` and write `body`, `parser` and `on_whole`."""

    path: str = ""
    streams: bool = True  # False: one body per request (embeddings), whatever engine.stream says
    whole_kind: str = "whole"  # engines.base.RESPONSES of a response that does not stream
    has_output: bool = True  # False: no output tokens (an embedding)

    def __init__(self, model: str, opts: Any, tokenizer: Tokenizer) -> None:
        """`opts`: the engine's OpenAIEngineConfig (not imported: it names this family)."""
        self.model = model
        self.opts = opts
        self.tokenizer = tokenizer
        self.stream = opts.stream and self.streams
        self.sampling = {k: getattr(opts, k) for k in SAMPLING_OPTIONS if getattr(opts, k) is not None}
        self.extra_body = dict(opts.extra_body or {})

    def body(self, request: Request) -> dict[str, Any]:
        raise NotImplementedError

    def parser(self, state: StreamState) -> OnEvent:
        """What turns one stream event of this API into the events it carries."""
        raise NotImplementedError

    def on_whole(self, state: StreamState, body: dict[str, Any], now: float) -> None:
        raise NotImplementedError

    def auth_headers(self, api_key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    # -- helpers for the members ---------------------------------------------------------------

    def prompt(self, request: Request) -> str | list[int]:
        if self.opts.prompt_format == "token_ids" and request.prompt_token_ids is not None:
            return list(request.prompt_token_ids)
        return self.prompt_text(request)

    def prompt_text(self, request: Request) -> str:
        if request.prompt_text is not None:
            return request.prompt_text
        return self.tokenizer.decode(list(request.prompt_token_ids))

    def finish(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body with the user's extra keys merged in (config checks they override none of ours)."""
        if self.extra_body:
            body.update(self.extra_body)
        return body


def check_error(payload: dict[str, Any], what: str) -> None:
    """A stream event or body that is an error: the request fails with the server's message."""
    if payload.get("type") == "error" or payload.get("error"):
        raise ServerError(f"{what}: {error_message(json.dumps(payload))}")
