"""httpx: the transport before aiohttp, kept for A/B comparisons (`engine.transport=httpx`).

One `AsyncClient` per event loop, its pool holding at most `max_connections` connections.
httpcore's trace extension stamps the pool wait (its first event: opening a connection, or
writing on a kept-alive one), the last byte written and the response headers. httpx bounds
each read and write by `request_timeout_s`, not the whole request: the engine does that.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from engines.transports.base import STALE_RETRIES, RequestTiming, TransportSettings


class HttpxResponse:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code

    async def read(self) -> bytes:
        return await self._response.aread()

    def chunks(self) -> AsyncIterator[bytes]:
        return self._response.aiter_raw()


class HttpxTransport:
    name = "httpx"

    def __init__(self, settings: TransportSettings) -> None:
        self.settings = settings
        timeout = settings.request_timeout_s
        self._client = httpx.AsyncClient(
            headers=settings.headers,
            timeout=httpx.Timeout(connect=settings.connect_timeout_s, read=timeout,
                                  write=timeout, pool=None),
            limits=httpx.Limits(max_connections=settings.max_connections,
                                max_keepalive_connections=settings.max_connections),
        )

    @asynccontextmanager
    async def post(
        self, url: str, body: bytes, headers: dict[str, str], timing: RequestTiming
    ) -> AsyncIterator[HttpxResponse]:
        async def trace(name: str, info: dict) -> None:  # httpcore's events, in order
            now = time.perf_counter()
            if name == "connection.connect_tcp.started":
                timing.connecting(now)  # a new connection: not reused
            elif name in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
                timing.connected(now)
            timing.started(now)
            if name.endswith("send_request_body.complete"):  # http11. or http2.
                timing.written_s = now
            elif name.endswith("receive_response_headers.complete"):
                timing.headers_s = now

        for attempt in range(STALE_RETRIES + 1):
            request = self._client.build_request(
                "POST", url, content=body, headers=headers, extensions={"trace": trace}
            )
            timing.reused = True  # until httpcore says it opens a connection
            try:
                response = await self._client.send(request, stream=True)
                break
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
                # a kept-alive connection the server had closed (as in aiohttp_transport)
                if not timing.reused or attempt == STALE_RETRIES:
                    raise
        try:
            yield HttpxResponse(response)
        finally:
            await response.aclose()

    def classify(self, err: BaseException) -> str | None:
        if isinstance(err, httpx.TimeoutException):
            return "timeout"
        if isinstance(err, httpx.HTTPError):
            return "connection"
        return None

    async def close(self) -> None:
        await self._client.aclose()
