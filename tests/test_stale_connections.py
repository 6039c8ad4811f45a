"""A server that says keep-alive but closes each connection after a streamed response (as
llama.cpp's llama-server does): each transport sends a request that drew such a
connection from its pool again on another, so no request fails for it; a connection that
fails before the response on a fresh connection still fails the request."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from engines.base import Request, SamplingParams
from engines.openai_http import OpenAIEngine

TOKENS = 4


class ClosingServer:
    """HTTP/1.1 on raw asyncio: each connection answers one streamed completion, headers
    saying keep-alive, then is closed a little later without reading the next request
    (`refuse=True`: every connection is closed before any answer)."""

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.connections = 0
        self.answered = 0
        self.port = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ClosingServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        self._loop = asyncio.new_event_loop()
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        head = await reader.readuntil(b"\r\n\r\n")
        if self.refuse:
            writer.close()
            return
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Connection: keep-alive\r\nKeep-Alive: timeout=5\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        for i in range(TOKENS):
            chunk = {"choices": [{"index": 0, "text": f" t{i}", "finish_reason": None}]}
            writer.write(_chunk(b"data: " + json.dumps(chunk).encode() + b"\n\n"))
        done = {"choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": TOKENS, "total_tokens": 3 + TOKENS}}
        writer.write(_chunk(b"data: " + json.dumps(done).encode() + b"\n\n"))
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        self.answered += 1
        await asyncio.sleep(0.05)  # the client has sent its next request on this connection by now
        writer.close()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def requests(n: int) -> list[Request]:
    return [Request(id=f"r{i}", max_tokens=TOKENS, prompt_text="a b c", sampling=SamplingParams()) for i in range(n)]


async def one_after_another(engine: OpenAIEngine, batch: list[Request]) -> list:
    finals = []
    for request in batch:
        events = [event async for event in engine.stream(request)]
        finals.append(events[-1])
    await engine.aclose()
    return finals


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_requests_on_connections_the_server_closed_go_again_and_all_succeed(transport):
    with ClosingServer() as server:
        engine = OpenAIEngine(model="m", base_url=f"http://127.0.0.1:{server.port}/v1",
                              max_connections=1, transport=transport)
        finals = asyncio.run(one_after_another(engine, requests(6)))
    assert [f.error for f in finals] == [None] * 6
    assert [f.num_output_tokens for f in finals] == [TOKENS] * 6
    assert server.answered == 6  # each request was answered once: no request was sent twice
    assert server.connections >= 6  # a new connection for each: the closed ones were dropped


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_a_server_that_closes_before_answering_still_fails_the_request(transport):
    with ClosingServer(refuse=True) as server:
        engine = OpenAIEngine(model="m", base_url=f"http://127.0.0.1:{server.port}/v1",
                              max_connections=1, transport=transport)
        finals = asyncio.run(one_after_another(engine, requests(2)))
    assert all(f.finish_reason == "error" for f in finals)
    assert all("connection failed" in f.error for f in finals)
    assert server.connections == 2  # a fresh connection's failure is not tried again

