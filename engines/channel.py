"""A request's events, from an engine's own thread to the load generator's asyncio loop.

`EventChannel` hands each event over on its own (one wake-up of the caller's loop per
event). That is what an engine needs whose events the caller stamps on receipt (the
reference engine's step loop: no `received_s`).

An engine that stamps each event itself where it arrives (`TokenEvent.received_s`: the HTTP
client) can let its channels share an `EventMailbox`, which carries the events of every
stream to the caller's loop together: the first token and the last event of a stream at
once, the tokens between them within `hold_s`. The figures do not change (each token keeps
its own receipt time); the client wakes its loop at most 20 times a second (with
HOLD_S = 0.05), besides first tokens and last events, instead of once per
token. Each wake-up is a thread switch and a syscall pair: on a machine whose cores the
server also uses, the client's CPU time is time the server's threads wait (docs/peers.md,
"Footprint").
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

from engines.base import TokenEvent

HOLD_S = 0.05  # the longest a token between a stream's first and last waits for the next wake-up


class EventMailbox:
    """Events of many channels on their way to one caller loop, in the order they were posted.

    `post` is called on the sender's thread, inside its event loop (the timer of the held
    events runs there); without a running loop there, every event goes at once.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, hold_s: float = HOLD_S) -> None:
        self.loop = loop
        self.hold_s = hold_s
        self._lock = threading.Lock()
        self._pending: list[tuple[asyncio.Queue, TokenEvent]] = []
        self._sent = False  # a drain is on its way to the caller's loop; it takes later posts too
        self._timer: asyncio.TimerHandle | None = None

    def post(self, queue: asyncio.Queue, event: TokenEvent, urgent: bool) -> None:
        with self._lock:
            self._pending.append((queue, event))
            if self._sent:
                return
            if not urgent:
                if self._timer is not None:
                    return
                try:
                    self._timer = asyncio.get_running_loop().call_later(self.hold_s, self._flush)
                    return
                except RuntimeError:  # no loop on the sender's thread: nothing to hold with
                    pass
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._sent = True
        self._send()

    def _flush(self) -> None:
        """On the sender's loop, hold_s after the oldest held event."""
        with self._lock:
            self._timer = None
            if self._sent or not self._pending:
                return
            self._sent = True
        self._send()

    def _send(self) -> None:
        try:  # no is_closed() check first: the loop may close between it and the call
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the caller's loop has closed: nobody listens any more
            pass

    def _drain(self) -> None:
        """On the caller's loop: every event posted so far, into its channel's queue."""
        with self._lock:
            pending, self._pending, self._sent = self._pending, [], False
        for queue, event in pending:
            queue.put_nowait(event)


class EventChannel:
    """A request's events, from the engine's own thread to the caller's asyncio loop, in order.

    Made inside the caller's loop; `deliver` may be called from any thread (events that
    arrive after the caller's loop closed are dropped). With a `mailbox` (made for the same
    caller loop), events stamped with `received_s` may wait for the mailbox's next trip;
    the first token, the final event and any unstamped event go at once.
    """

    def __init__(self, mailbox: EventMailbox | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[TokenEvent] = asyncio.Queue()
        if mailbox is not None and mailbox.loop is not self._loop:
            raise ValueError("the mailbox carries events to another event loop")
        self._mailbox = mailbox
        self._tokens_seen = False  # touched on the sender's thread only

    def deliver(self, event: TokenEvent) -> None:
        if self._mailbox is not None:
            first_token = bool(event.token_ids) and not self._tokens_seen
            self._tokens_seen = self._tokens_seen or bool(event.token_ids)
            urgent = event.finished or event.received_s is None or first_token
            self._mailbox.post(self._queue, event, urgent)
            return
        try:  # no is_closed() check first: the loop may close between it and the call
            self._loop.call_soon_threadsafe(self._queue.put_nowait, event)
        except RuntimeError:  # the caller's loop has closed: nobody listens any more
            pass

    async def events(self) -> AsyncIterator[TokenEvent]:
        """Every event up to and including the final one."""
        while True:
            event = await self._queue.get()
            yield event
            if event.finished:
                return
