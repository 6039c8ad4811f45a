"""The ray backend's records on a connection of their own (llmperf/measure/backends/
record_stream.py): a child started as an actor starts it (ray_child.py) sends its messages to the
coordinator's RecordStream, driven here without Ray."""

from __future__ import annotations

import os
import pickle
import signal
import socket
import threading
import time
from multiprocessing.connection import Client

import pytest

from llmperf.measure.backends.ray_child import ChildLoad
from llmperf.measure.backends.record_stream import RecordStream, StreamQueue
from llmperf.measure.worker_process import perf_origin
from tests.test_ray_child import spec


class Coordinator:
    """A RecordStream read every 0.1 s as ray_pool's loop reads it, one ChildLoad run on a
    thread as its actor runs it; the start set on "ready"."""

    def __init__(self, n: int, rate_rps: float, stream_to: tuple | None = None) -> None:
        self.stream = RecordStream("127.0.0.1", 1)
        self.share = spec(n, rate_rps)
        self.child = ChildLoad(stream=stream_to or (self.stream.address, self.stream.authkey))
        self.got: list[tuple] = []
        self.failure: list[str | None] = []
        self.runner = threading.Thread(target=self.run, daemon=True)
        self.nice: int | None = None  # the starting thread's, which the child inherits
        self.posted: list[bytes] = []  # what the child's pipe had: nothing when it streams

    def run(self) -> None:
        self.nice = os.getpriority(os.PRIO_PROCESS, 0)
        self.failure.append(self.child.run(self.share, self.posted.append))

    def read_until(self, kinds: set[str], timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.got or self.got[-1][0] not in kinds:
            assert time.monotonic() < deadline, f"no {kinds} within {timeout_s} s"
            for index, messages in self.stream.read(0.1):
                assert index == 1
                for message in map(pickle.loads, messages):
                    self.got.append(message)
                    if message[0] == "ready":
                        self.child.set_start(
                            time.perf_counter() - perf_origin(self.share.origin_unix_ns) + 0.1)


def test_a_childs_messages_come_over_its_stream_in_order_and_none_through_its_pipe():
    c = Coordinator(300, 200.0)
    c.runner.start()
    try:
        c.read_until({"done", "failed"})
        c.runner.join(timeout=30)
        # the end of its connection comes after its "done", in this read or a later one
        deadline = time.monotonic() + 10
        while 1 not in c.stream.closed:
            assert time.monotonic() < deadline, "its connection did not end with the child"
            c.got += [pickle.loads(m) for _, ms in c.stream.read(0.1) for m in ms]
    finally:
        c.stream.close()
    kinds = [kind for kind, _, _ in c.got]
    # its priority first (the loop's own nice), then ready, records in batches, done
    assert kinds[:2] == ["priority", "ready"] and kinds[-1] == "done"
    assert set(kinds[2:-1]) == {"records"} and len(kinds) - 3 >= 10  # ~1.5 s in 0.05 s batches
    assert c.got[0][2] == c.nice
    ids = [r.id for kind, _, batch in c.got if kind == "records" for r in batch]
    assert sorted(ids) == sorted(f"r{k}" for k in range(300)) and len(set(ids)) == 300
    assert c.got[-1][2].num_dispatched == 300
    assert c.failure == [None] and c.posted == []
    assert c.stream.closed == {1}  # its connection ended with the child, nothing after "done"


def test_a_child_killed_mid_run_closes_its_stream_and_keeps_what_it_sent():
    c = Coordinator(2000, 200.0)  # 10 s of load
    c.runner.start()
    try:
        c.read_until({"records"})
        os.kill(c.child.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while 1 not in c.stream.closed:
            assert time.monotonic() < deadline
            c.got += [pickle.loads(m) for _, ms in c.stream.read(0.1) for m in ms]
        c.runner.join(timeout=30)
    finally:
        c.stream.close()
    assert c.failure == [f"load worker process exited with code {-signal.SIGKILL}"]
    received = [r.id for kind, _, batch in c.got if kind == "records" for r in batch]
    assert received and len(set(received)) == len(received)
    assert "done" not in [kind for kind, _, _ in c.got]


def test_a_child_that_cannot_reach_the_coordinator_says_where_and_what_to_use():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    c = Coordinator(10, 100.0, stream_to=(("127.0.0.1", port), b"k" * 32))
    c.runner.start()
    c.runner.join(timeout=60)
    c.stream.close()
    assert not c.runner.is_alive()
    (failure,) = c.failure
    assert failure.startswith(f"could not reach the coordinator at 127.0.0.1:{port}")
    assert "ConnectionRefusedError" in failure and "LLMPERF_RAY_RELAY=take" in failure


def test_a_connection_without_the_key_is_refused_and_the_worker_after_it_is_read():
    stream = RecordStream("127.0.0.1", 1)
    try:
        with pytest.raises(Exception):  # noqa: B017 (refused: AuthenticationError or a reset)
            Client(stream.address, authkey=b"not the key" * 3)
        deadline = time.monotonic() + 10
        while not stream.errors:
            assert time.monotonic() < deadline, "the refusal was not noted"
            time.sleep(0.02)
        assert "AuthenticationError" in stream.errors[0]
        with Client(stream.address, authkey=stream.authkey) as conn:
            conn.send_bytes(pickle.dumps(("hello", 4, None)))
            conn.send_bytes(pickle.dumps(("ready", 4, None)))
            got = []
            while not got:
                got = stream.read(1.0)
        assert [(i, [pickle.loads(m) for m in ms]) for i, ms in got] == [(4, [("ready", 4, None)])]
    finally:
        stream.close()


def test_closing_with_a_worker_never_connected_ends_its_accept():
    stream = RecordStream("127.0.0.1", 3)
    assert stream.read(0.05) == []
    stream.close()
    assert not stream._accepting.is_alive()


def test_tcp_connections_send_each_batch_at_once():
    """Nagle's algorithm off at both ends: a batch is not held for the last one's ack."""
    stream = RecordStream("127.0.0.1", 1)
    try:
        queue = StreamQueue(stream.address, stream.authkey, 0)
        deadline = time.monotonic() + 10
        while not stream._new:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        (accepted,) = stream._new
        for conn in (queue._conn, accepted):
            with socket.socket(fileno=os.dup(conn.fileno())) as sock:
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        queue.close()
    finally:
        stream.close()


def test_at_a_high_rate_a_batch_holds_at_most_records_batch_records():
    """The coordinator's turn at a batch takes a core from a load for as long: batches are
    cut at RECORDS_BATCH records, not only every RECORDS_FLUSH_S (a local worker's the same:
    worker_main is shared)."""
    from llmperf.measure.worker_process import RECORDS_BATCH

    c = Coordinator(900, 3000.0)
    c.share.records_flush_s = 0.05  # 150 records a flush uncut
    c.runner.start()
    try:
        c.read_until({"done", "failed"})
        c.runner.join(timeout=30)
    finally:
        c.stream.close()
    sizes = [len(batch) for kind, _, batch in c.got if kind == "records"]
    assert sum(sizes) == 900 and max(sizes) == RECORDS_BATCH
    assert sizes.count(RECORDS_BATCH) >= 900 // RECORDS_BATCH // 2  # most of them cut by count


def test_messages_of_any_size_come_whole_and_in_order_from_several_connections():
    """The stream cuts each connection's bytes into messages by their length headers: one
    over 16 KiB (its header sent apart), one over the read's 64 KiB chunk (several reads),
    an empty one, from two workers writing in turn, each worker's in the order sent."""
    stream = RecordStream("127.0.0.1", 2)
    sizes = [0, 1, 100, 16385, 200_000, 3300, 70_000]
    try:
        conns = [Client(stream.address, authkey=stream.authkey) for _ in range(2)]
        for index, conn in enumerate(conns):
            conn.send_bytes(pickle.dumps(("hello", index, None)))
        sent = {index: [bytes([index + 1]) * size + str(k).encode() for k, size in enumerate(sizes)]
                for index in range(2)}
        for k in range(len(sizes)):  # interleaved: worker 0's k-th, then worker 1's
            for index, conn in enumerate(conns):
                conn.send_bytes(sent[index][k])
        got: dict[int, list[bytes]] = {0: [], 1: []}
        deadline = time.monotonic() + 10
        while any(len(got[i]) < len(sizes) for i in got):
            assert time.monotonic() < deadline, {i: len(m) for i, m in got.items()}
            for index, messages in stream.read(0.1):
                got[index].extend(messages)
        assert got == sent
        for conn in conns:
            conn.close()
        deadline = time.monotonic() + 10
        while stream.closed != {0, 1}:  # both ends seen, nothing more read
            assert time.monotonic() < deadline
            assert stream.read(0.1) == []
    finally:
        stream.close()
