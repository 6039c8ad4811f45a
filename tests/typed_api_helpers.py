"""A scripted server for the endpoint tests: it answers every POST with the bytes a test
gives (a recorded event stream), and keeps each request's headers and body."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from engines.base import Request, SamplingParams
from engines.openai_http import OpenAIEngine
from llmperf.measure.loadgen import LoadGenerator
from llmperf.serve.server import ServerThread

FIXTURES = Path(__file__).resolve().parent / "fixtures"


class Scripted:
    """`answer(body) -> bytes` is the response to each POST; `seen` holds (path, headers, body)."""

    def __init__(self, answer: Callable[[dict], bytes]) -> None:
        self.answer = answer
        self.seen: list[tuple[str, dict[str, str], bytes]] = []

    async def post(self, http: HTTPRequest) -> Response:
        raw = await http.body()
        self.seen.append((http.url.path, dict(http.headers), raw))
        data = self.answer(json.loads(raw))

        async def events():
            for event in data.split(b"\n\n"):  # one event per write, as a server sends them
                if event.strip():
                    yield event + b"\n\n"
                    await asyncio.sleep(0.002)

        return StreamingResponse(events(), media_type="text/event-stream")

    def serve(self) -> ServerThread:
        routes = [Route("/v1/{path:path}", self.post, methods=["POST"])]
        return ServerThread(Starlette(routes=routes))


def records_of(base_url: str, requests: list[Request], **options) -> list:
    engine = OpenAIEngine(options.pop("model", "m"), base_url=base_url, metrics_url="off", **options)
    out: list = []
    try:
        asyncio.run(LoadGenerator(engine, out.append).run([], requests))
    finally:
        engine.stop()
    return sorted(out, key=lambda r: r.id)


def text_requests(n: int, max_tokens: int = 8, prompt: str = "hello there", **kw) -> list[Request]:
    sampling = SamplingParams(temperature=0.0, ignore_eos=True)
    return [Request(id=f"r{i}", max_tokens=max_tokens, prompt_text=prompt, sampling=sampling,
                    arrival_s=0.01 * i, **kw) for i in range(n)]
