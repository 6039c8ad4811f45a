"""aiohttp: the lean transport, and the default.

One `ClientSession` per event loop (so one per load-generator process), its connector
holding at most `max_connections` connections, kept alive between requests. The body is
read with `iter_any()`: whatever the socket delivered, in one piece, with no line splitting
here (the SSE split is the caller's, over a bytearray). aiohttp's trace hooks stamp the
connection-pool wait, the connect time, the last byte written and the response headers; a
hook costs an await only on the events it is set for, never per body chunk.

A kept-alive connection the server has closed meanwhile fails the next request on it before
a byte of the response comes (`ServerDisconnectedError`, or a reset on the write): a server
that says keep-alive but closes after each stream (llama.cpp's llama-server does) fails that
way on most reuses. Such a request never reached the server's handler, so it goes once more,
on another connection (up to STALE_RETRIES times while it draws closed kept-alive ones),
and its times include the failed try (one local round trip); a failure on a new connection, or after the response
began, is the request's error as before.

Timeouts: `connect_timeout_s` bounds opening a connection; the whole request is bounded by
the engine's own deadline, not by aiohttp's `total`, which would put a timer context around
every read of the body.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp

from engines.transports.base import STALE_RETRIES, RequestTiming, TransportSettings

READ_BUFSIZE = 1 << 18  # bytes one read may hand back: a whole burst of chunks at once


async def _on_reuse(session, ctx, params) -> None:  # a kept-alive connection
    ctx.trace_request_ctx.reusing(time.perf_counter())


async def _on_connect(session, ctx, params) -> None:  # opening a new connection
    ctx.trace_request_ctx.connecting(time.perf_counter())


async def _on_connected(session, ctx, params) -> None:
    ctx.trace_request_ctx.connected(time.perf_counter())


async def _on_written(session, ctx, params) -> None:  # headers, then each body chunk
    ctx.trace_request_ctx.written_s = time.perf_counter()


async def _on_headers(session, ctx, params) -> None:  # the response's headers came
    ctx.trace_request_ctx.headers_s = time.perf_counter()


def _trace_config() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_connection_create_start.append(_on_connect)
    trace.on_connection_create_end.append(_on_connected)
    trace.on_connection_reuseconn.append(_on_reuse)
    trace.on_request_headers_sent.append(_on_written)
    trace.on_request_chunk_sent.append(_on_written)
    trace.on_request_end.append(_on_headers)
    return trace


class AiohttpResponse:
    __slots__ = ("_response", "status")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status

    async def read(self) -> bytes:
        return await self._response.read()

    def chunks(self) -> AsyncIterator[bytes]:
        return self._response.content.iter_any()


class AiohttpTransport:
    name = "aiohttp"

    def __init__(self, settings: TransportSettings) -> None:
        self.settings = settings
        connector = aiohttp.TCPConnector(limit=settings.max_connections, limit_per_host=0)
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers=settings.headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=settings.connect_timeout_s),
            read_bufsize=READ_BUFSIZE,
            trace_configs=[_trace_config()],
        )

    @asynccontextmanager
    async def post(
        self, url: str, body: bytes, headers: dict[str, str], timing: RequestTiming
    ) -> AsyncIterator[AiohttpResponse]:
        for attempt in range(STALE_RETRIES + 1):
            try:
                response = await self._session.post(url, data=body, headers=headers,
                                                    trace_request_ctx=timing)
                break
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                if not timing.reused or attempt == STALE_RETRIES:
                    raise  # else the pool may hold more the server closed: again
        async with response:
            yield AiohttpResponse(response)

    def classify(self, err: BaseException) -> str | None:
        if isinstance(err, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
            return "timeout"
        if isinstance(err, aiohttp.ClientError):
            return "connection"
        return None

    async def close(self) -> None:
        await self._session.close()
