"""Each load worker's records on a connection of its own to the coordinator: the transport of
both multi-process backends. A local worker process (llmperf/measure/workers.py) and a Ray
actor's child (ray_child.py; `LLMPERF_RAY_RELAY=stream`, the default) connect to the
coordinator over TCP and send their messages (records in batches, ready, saturated, done) as
they would put them in a queue, and the coordinator reads them as they come: one hop.
Ray, for its backend, still places the actors, carries the control calls and the clock
probes, and tells a lost one; the records never pass through the actor's process.

- **Authenticated.** The coordinator listens on its node's address (the local backend: the
  loopback) with a random key; a connection that does not answer the key's challenge
  (multiprocessing.connection's HMAC) is refused before anything is unpickled.
- **In order.** One connection per worker, its messages in the order the worker put them; the
  first says which worker it is.
- **A lost worker** closes its connection (a local one dies with its coordinator's thread, a
  Ray child with its actor): the coordinator stops waiting on it (`closed`).
- **Sent when put.** Nagle's algorithm is off at both ends (`TCP_NODELAY`): a batch goes out
  when the worker's feeder thread has it, not when the one before is acknowledged. With it
  on, a load's dispatch lag p99 over loopback read 2.3x a pipe's at 4500 req/s on 2 cores
  (batches of 16 records every 5 ms), off 1.09x (docs/sizing.md).
- **Read raw.** The coordinator's turns share the cores with the loads: it reads each
  ready socket in one `recv_into` and cuts the bytes into messages by their headers, with
  one selector for all (`RecordStream`). Beside the same two local workers at 6200 req/s on
  2 cores, the loads' dispatch lag p99 read 0.71x and 0.85x what it read with their records
  in one multiprocessing queue (docs/sizing.md, "One transport").
- Where Ray's workers cannot reach the coordinator's address (a firewall, a Ray client
  connection from outside the cluster), `LLMPERF_RAY_RELAY=take` carries the records in the
  coordinator's calls to the actors instead.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import selectors
import socket
import struct
import threading
from multiprocessing.connection import Client, Connection, Listener

HELLO = "hello"
_HEADER = struct.Struct("!i")  # multiprocessing.connection's length header
_BIG = struct.Struct("!Q")  # after a header of -1: a message of 2 GiB or more


class RecordStream:
    """The coordinator's end: a listener the workers connect to, and their messages
    read as they come (`read`).

    Lean per message, as the coordinator's turns take a core from the loads beside it: each
    authenticated connection's socket stays registered with one selector (epoll), and a turn
    reads what a ready socket holds in one `recv_into` and cuts it into messages by their
    length headers (multiprocessing.connection's framing, which the worker's `send_bytes`
    writes), where `Connection.recv_bytes` costs a `poll` and two reads per message."""

    def __init__(self, host: str, workers: int) -> None:
        self.authkey = os.urandom(32)
        self._listener = Listener((host, 0), authkey=self.authkey)
        self.address: tuple[str, int] = self._listener.address
        self._workers = workers
        self._lock = threading.Lock()
        self._new: list[Connection] = []  # accepted by the accept thread, not yet registered
        self._selector = selectors.DefaultSelector()
        # the accept thread's byte on this pair wakes a read waiting on the selector
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._readers: list[_Reader] = []
        self.closed: set[int] = set()  # workers whose connection has ended
        self.errors: list[str] = []  # connections refused (a wrong key) or broken at the start
        self._closing = threading.Event()
        self._accepting = threading.Thread(target=self._accept, name="llmperf-ray-stream",
                                           daemon=True)
        self._accepting.start()

    def _accept(self) -> None:
        accepted = 0
        while accepted < self._workers:
            try:
                conn = self._listener.accept()
            except Exception as error:  # a refused key, a peer gone mid-challenge, or closed
                if self._closing.is_set():
                    return
                self.errors.append(f"{type(error).__name__}: {error}")
                continue
            accepted += 1
            _nodelay(conn)
            with self._lock:
                self._new.append(conn)
            with contextlib.suppress(OSError):
                self._wake_w.send(b"\0")

    def read(self, timeout: float) -> list[tuple[int, list[bytes]]]:
        """Each worker's messages that came within `timeout`, pickled, in order, with the
        worker they came from."""
        with self._lock:
            new, self._new = self._new, []
        for conn in new:
            reader = _Reader(conn)
            self._readers.append(reader)
            self._selector.register(reader.sock, selectors.EVENT_READ, reader)
        got: dict[int, list[bytes]] = {}
        for key, _ in self._selector.select(timeout):
            reader = key.data
            if reader is None:  # woken: a connection came; registered at the next turn
                with contextlib.suppress(OSError):
                    self._wake_r.recv(4096)
                continue
            messages, ended = reader.read()
            if reader.index is not None and messages:
                got.setdefault(reader.index, []).extend(messages)
            if ended:
                self._end(reader)
        return list(got.items())

    def heard(self) -> set[int]:
        """The workers whose connection has said which worker it is (ended ones too)."""
        return self.closed | {r.index for r in self._readers if r.index is not None}

    def _end(self, reader: _Reader) -> None:
        """A connection ended: the worker is done, or lost."""
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(reader.sock)
        reader.close()
        self._readers.remove(reader)
        if reader.index is not None:
            self.closed.add(reader.index)

    def close(self) -> None:
        self._closing.set()
        if self._accepting.is_alive():  # a worker never connected: wake its accept to end it
            with contextlib.suppress(OSError):
                socket.create_connection(self.address, timeout=1.0).close()
            self._accepting.join(timeout=5.0)
        with self._lock:
            new, self._new = self._new, []
        for conn in new:
            conn.close()
        for reader in list(self._readers):
            self._end(reader)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
        self._listener.close()


class _Reader:
    """One worker's connection, read raw: its messages cut from the bytes by their headers
    (4 bytes, big-endian, the length; -1 and 8 more for one of 2 GiB or more), the first
    naming the worker."""

    CHUNK = 1 << 16

    def __init__(self, conn: Connection) -> None:
        self.conn = conn  # keeps the authenticated descriptor; the socket below is a copy
        self.sock = socket.socket(fileno=os.dup(conn.fileno()))
        self.sock.setblocking(False)
        self.index: int | None = None
        self._buf = bytearray()
        self._chunk = bytearray(self.CHUNK)  # reused: no fresh allocation a read

    def read(self) -> tuple[list[bytes], bool]:
        """The whole messages received so far, and whether the connection has ended."""
        ended = self._fill()
        messages = self._cut()
        if self.index is None and messages:  # its first: which worker it is
            self.index = pickle.loads(messages.pop(0))[1]
        return messages, ended

    def _fill(self) -> bool:
        """What the socket holds, onto the buffer; True if the connection has ended."""
        while True:
            try:
                n = self.sock.recv_into(self._chunk)
            except (BlockingIOError, InterruptedError):
                return False
            except OSError:  # reset: the worker died (a Ray child with its actor)
                return True
            if n == 0:
                return True
            self._buf += memoryview(self._chunk)[:n]
            if n < self.CHUNK:
                return False

    def _cut(self) -> list[bytes]:
        """The buffer's whole messages, each copied once; a partial one stays for later."""
        messages, buf, pos = [], self._buf, 0
        with memoryview(buf) as view:  # released before the buffer is cut
            while len(buf) - pos >= 4:
                (size,), head = _HEADER.unpack_from(buf, pos), 4
                if size == -1:
                    if len(buf) - pos < 12:
                        break
                    (size,), head = _BIG.unpack_from(buf, pos + 4), 12
                if len(buf) - pos - head < size:
                    break
                messages.append(bytes(view[pos + head:pos + head + size]))
                pos += head + size
        del buf[:pos]
        return messages

    def close(self) -> None:
        self.sock.close()
        self.conn.close()


class StreamQueue:
    """The worker's end, used as worker_main's results queue: `put` returns at once and a
    thread pickles and sends each message, as a multiprocessing queue's feeder thread does;
    `close` sends what is left and ends the connection."""

    def __init__(self, address: tuple[str, int], authkey: bytes, index: int) -> None:
        self._conn = Client(address, authkey=authkey)
        _nodelay(self._conn)
        self._conn.send_bytes(pickle.dumps((HELLO, index, None)))
        self._outbox: queue.SimpleQueue = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._feeder = threading.Thread(target=self._feed, name="llmperf-stream-feeder",
                                        daemon=True)
        self._feeder.start()

    def put(self, message: tuple) -> None:
        self._outbox.put(message)

    def _feed(self) -> None:
        while (message := self._outbox.get()) is not None:
            try:
                self._conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
            except BaseException as error:  # the coordinator's end is gone: close() says so
                self._error = error
                return

    def close(self) -> None:
        """Every message put is sent (raises what broke the connection if one could not be)."""
        self._outbox.put(None)
        self._feeder.join()
        self._conn.close()
        if self._error is not None:
            raise RuntimeError(f"the records' stream to the coordinator broke: {self._error}")


def _nodelay(conn: Connection) -> None:
    """Nagle's algorithm off on a connection's TCP socket (its descriptor, shared)."""
    with contextlib.suppress(OSError):
        with socket.socket(fileno=os.dup(conn.fileno())) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
