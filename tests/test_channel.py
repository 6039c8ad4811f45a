"""engines/channel.py: an EventMailbox carries the events of many streams to the caller's loop
together, in order; a stream's first token, its final event and unstamped events at once,
the tokens between within hold_s."""

from __future__ import annotations

import asyncio
import threading

import pytest

from engines.base import TokenEvent
from engines.channel import EventChannel, EventMailbox


class CountingMailbox(EventMailbox):
    """Counts its trips to the caller's loop."""

    def __init__(self, loop, hold_s):
        super().__init__(loop, hold_s)
        self.trips = 0

    def _drain(self):
        self.trips += 1
        super()._drain()


def token(rid: str, i: int, stamped: bool = True) -> TokenEvent:
    return TokenEvent(rid, (i,), float(i), received_s=float(i) if stamped else None)


def final(rid: str) -> TokenEvent:
    return TokenEvent(rid, (), 99.0, finished=True, finish_reason="length", received_s=99.0)


class Sender:
    """An engine's thread with its own event loop, as the HTTP client has."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, fn):
        """fn() on the sender's loop, waited for."""
        done = threading.Event()

        def call():
            fn()
            done.set()

        self.loop.call_soon_threadsafe(call)
        assert done.wait(5)

    def close(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture
def sender():
    s = Sender()
    yield s
    s.close()


async def collect(channel: EventChannel) -> list[TokenEvent]:
    return [e async for e in channel.events()]


def test_two_streams_arrive_whole_and_in_order_in_three_trips(sender):
    """First tokens go at once (one trip for both, posted together), the tokens between them
    wait (hold_s is far away), and the final events take every held token along."""

    async def main():
        box = CountingMailbox(asyncio.get_running_loop(), hold_s=60.0)
        a, b = EventChannel(box), EventChannel(box)
        tasks = [asyncio.create_task(collect(c)) for c in (a, b)]

        def firsts():
            a.deliver(token("a", 0))
            b.deliver(token("b", 0))

        sender.run(firsts)
        await asyncio.sleep(0.05)
        assert box.trips == 1

        def rest():
            for i in range(1, 20):
                a.deliver(token("a", i))
                b.deliver(token("b", i))

        sender.run(rest)
        await asyncio.sleep(0.05)
        assert box.trips == 1  # held: no trip for the tokens between
        sender.run(lambda: (a.deliver(final("a")), b.deliver(final("b"))))
        got_a, got_b = await asyncio.wait_for(asyncio.gather(*tasks), 5)
        assert box.trips == 2
        for rid, got in (("a", got_a), ("b", got_b)):
            assert [e.token_ids for e in got[:-1]] == [(i,) for i in range(20)]
            assert all(e.request_id == rid for e in got) and got[-1].finished

    asyncio.run(main())


def test_held_tokens_arrive_after_hold_s_without_a_final_event(sender):
    async def main():
        box = CountingMailbox(asyncio.get_running_loop(), hold_s=0.02)
        channel = EventChannel(box)
        sender.run(lambda: channel.deliver(token("r", 0)))
        got = [await asyncio.wait_for(channel._queue.get(), 5)]
        sender.run(lambda: [channel.deliver(token("r", i)) for i in range(1, 5)])
        got += [await asyncio.wait_for(channel._queue.get(), 5) for _ in range(4)]
        assert [e.token_ids for e in got] == [(i,) for i in range(5)]
        assert box.trips == 2  # the first token, then the held four when the timer fired

    asyncio.run(main())


def test_an_unstamped_event_goes_at_once_and_keeps_the_order(sender):
    """An event the caller must stamp on receipt (no received_s) cannot wait."""

    async def main():
        box = CountingMailbox(asyncio.get_running_loop(), hold_s=60.0)
        channel = EventChannel(box)
        sender.run(lambda: [channel.deliver(token("r", 0)), channel.deliver(token("r", 1)),
                            channel.deliver(token("r", 2, stamped=False))])
        got = [await asyncio.wait_for(channel._queue.get(), 5) for _ in range(3)]
        assert [e.token_ids for e in got] == [(0,), (1,), (2,)]

    asyncio.run(main())


def test_without_a_loop_on_the_sending_thread_every_event_goes_at_once():
    async def main():
        box = CountingMailbox(asyncio.get_running_loop(), hold_s=60.0)
        channel = EventChannel(box)
        thread = threading.Thread(target=lambda: [channel.deliver(token("r", i)) for i in range(3)])
        thread.start()
        thread.join(5)
        got = [await asyncio.wait_for(channel._queue.get(), 5) for _ in range(3)]
        assert [e.token_ids for e in got] == [(0,), (1,), (2,)]

    asyncio.run(main())


def test_a_mailbox_for_another_loop_is_refused():
    other = asyncio.new_event_loop()
    try:
        async def main():
            EventChannel(EventMailbox(other))

        with pytest.raises(ValueError, match="another event loop"):
            asyncio.run(main())
    finally:
        other.close()


def test_events_for_a_closed_caller_loop_are_dropped_not_raised(sender):
    async def make():
        box = EventMailbox(asyncio.get_running_loop(), hold_s=60.0)
        return box, EventChannel(box)

    loop = asyncio.new_event_loop()
    box, channel = loop.run_until_complete(make())
    loop.close()
    sender.run(lambda: [channel.deliver(token("late", 0)), channel.deliver(final("late"))])
    assert channel._queue.empty()
