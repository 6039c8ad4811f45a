"""What every transport is: settings in, a streamed POST out, and the errors it raises.

`Transport` is made inside the event loop that will use it (its client's connections are
bound to that loop) and closed in it. `post` opens a request and yields a `Response` whose
`status` is known (headers received); reading its `chunks()` gives the body's bytes as the
network delivered them: the client library's own iterator, with nothing wrapped around it,
since it runs once per chunk. Its errors come through as the library raises them, and
`classify` says what each one was. `RequestTiming` is where the transport writes its stamps, all
`time.perf_counter()`:

    pool_wait_s  handed to the transport -> started on a connection (opening one, or the
                 first write on a kept-alive one): the queue the client's own pool adds
    connect_s    opening a new connection took this (None: it went on a kept-alive one)
    reused       it went out on a kept-alive connection (the last attempt's)
    written_s    the request's last byte written
    headers_s    the response's headers received
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol

# Kept-alive connections a request may find closed by the server (before any byte of the
# response) and go again from, before it fails: see aiohttp_transport's docstring.
STALE_RETRIES = 3


@dataclass
class TransportSettings:
    max_connections: int
    connect_timeout_s: float
    request_timeout_s: float
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class RequestTiming:
    sent_s: float = 0.0  # perf_counter(): handed to the transport
    pool_wait_s: float | None = None
    written_s: float | None = None
    headers_s: float | None = None
    connect_s: float | None = None  # opening a new connection took this (None: a kept-alive one)
    reused: bool = False
    _connecting_s: float | None = None

    def connecting(self, now: float) -> None:
        self.started(now)
        self.reused = False
        self._connecting_s = now

    def reusing(self, now: float) -> None:
        self.started(now)
        self.reused = True

    def connected(self, now: float) -> None:
        if self._connecting_s is not None:
            self.connect_s = now - self._connecting_s

    def started(self, now: float) -> None:
        if self.pool_wait_s is None:
            self.pool_wait_s = now - self.sent_s


class Response(Protocol):
    status: int

    async def read(self) -> bytes: ...

    def chunks(self) -> AsyncIterator[bytes]: ...


class Transport(Protocol):
    name: str

    def __init__(self, settings: TransportSettings) -> None: ...

    def post(
        self, url: str, body: bytes, headers: dict[str, str], timing: RequestTiming
    ) -> AbstractAsyncContextManager[Response]: ...

    def classify(self, err: BaseException) -> str | None:
        """"timeout" (connect_timeout_s, or no byte for request_timeout_s), "connection" (refused,
        reset, closed mid-response), or None: not the transport's error."""

    async def close(self) -> None: ...
