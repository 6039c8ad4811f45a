"""/v1/completions: a prompt (text or token ids) in, `choices[].text` chunks out."""

from __future__ import annotations

from typing import Any

from engines.base import Request
from engines.endpoints.base import Endpoint, OnEvent
from engines.openai_stream import StreamState


class Completions(Endpoint):
    path = "completions"

    def body(self, request: Request) -> dict[str, Any]:
        body = openai_sampling_body(self, request)
        body["prompt"] = self.prompt(request)
        return self.finish(body)

    def parser(self, state: StreamState) -> OnEvent:
        return state.on_chunk

    def on_whole(self, state: StreamState, body: dict[str, Any], now: float) -> None:
        state.on_whole(body, "completions", now)


def openai_sampling_body(endpoint: Endpoint, request: Request) -> dict[str, Any]:
    """The fields completions and chat share, in the order llmperf has always sent them; the
    sampling options the user set (engine.top_p, ...) override the request's own."""
    s = request.sampling
    extra = endpoint.sampling
    body: dict[str, Any] = {
        "model": endpoint.model,
        "max_tokens": request.max_tokens,
        "temperature": s.temperature,
        "top_p": extra.get("top_p", s.top_p),
        "stream": endpoint.stream,
    }
    if endpoint.stream:
        body["stream_options"] = {"include_usage": True}
    opts = endpoint.opts
    if opts.n != 1:
        body["n"] = opts.n
    if opts.best_of is not None:
        body["best_of"] = opts.best_of
    if s.top_k:
        body["top_k"] = s.top_k
    if s.seed is not None:
        body["seed"] = s.seed
    if s.ignore_eos:
        body["ignore_eos"] = True  # an extra field; vLLM, SGLang, llmperf-serve honour it
    if s.stop_token_ids:
        body["stop_token_ids"] = list(s.stop_token_ids)
    body.update((k, v) for k, v in extra.items() if k != "top_p")
    return body
