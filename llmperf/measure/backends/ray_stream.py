"""The ray backend's records on a stream of their own (`LLMPERF_RAY_RELAY=stream`, the
default): each actor's child (ray_child.py) connects to the coordinator over TCP and sends its
messages there as a local worker sends them into its pipe, and the coordinator reads them as
the processes backend reads its queue (llmperf/measure/workers.py): one hop, as they come.
Ray still places the actors, carries the control calls and the clock probes, and tells a lost
one; the records no longer pass through the actor's process and Ray's calls.

- **Authenticated.** The coordinator listens on its node's address with a random key; a
  connection that does not answer the key's challenge (multiprocessing.connection's HMAC) is
  refused before anything is unpickled.
- **In order.** One connection per worker, its messages in the order the child put them; the
  first says which worker it is.
- **A lost worker** closes its connection (its child dies with the actor): the coordinator
  stops waiting on it and Ray's error names the loss (ray_pool.py).
- **Sent when put.** Nagle's algorithm is off at both ends (`TCP_NODELAY`): a batch goes out
  when the child's feeder thread has it, not when the one before is acknowledged. With it
  on, a load's dispatch lag p99 over loopback read 2.3x a pipe's at 4500 req/s on 2 cores
  (batches of 16 records every 5 ms), off 1.09x (docs/sizing.md).
- Where the workers cannot reach the coordinator's address (a firewall, a Ray client
  connection from outside the cluster), `LLMPERF_RAY_RELAY=take` carries the records in the
  coordinator's calls to the actors instead.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import socket
import threading
from multiprocessing.connection import Client, Connection, Listener, wait

HELLO = "hello"


class RecordStream:
    """The coordinator's end: a listener the workers' children connect to, and their messages
    read as they come (`read`)."""

    def __init__(self, host: str, workers: int) -> None:
        self.authkey = os.urandom(32)
        self._listener = Listener((host, 0), authkey=self.authkey)
        self.address: tuple[str, int] = self._listener.address
        self._workers = workers
        self._lock = threading.Lock()
        self._new: list[Connection] = []  # accepted, not yet named by their first message
        self._open: dict[Connection, int] = {}  # named: the worker each connection is
        self.closed: set[int] = set()  # workers whose connection has ended
        self.errors: list[str] = []  # connections refused (a wrong key) or broken at the start
        self._arrived = threading.Event()  # a connection was accepted
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
            self._arrived.set()

    def read(self, timeout: float) -> list[tuple[int, list[bytes]]]:
        """Each worker's messages that came within `timeout`, pickled, in order, with the
        worker they came from."""
        with self._lock:
            conns = self._new + list(self._open)
        if not conns:  # none yet: until one connects
            self._arrived.wait(timeout)
            self._arrived.clear()
            return []
        got: dict[int, list[bytes]] = {}
        for conn in wait(conns, timeout=timeout):
            index, messages = self._drain(conn)
            if index is not None:
                got.setdefault(index, []).extend(messages)
        return list(got.items())

    def _drain(self, conn: Connection) -> tuple[int | None, list[bytes]]:
        messages, index = [], self._open.get(conn)
        try:
            while conn.poll(0):
                message = conn.recv_bytes()
                if index is None:  # its first: which worker it is
                    index = pickle.loads(message)[1]
                    with self._lock:
                        self._new.remove(conn)
                        self._open[conn] = index
                    continue
                messages.append(message)
        except (EOFError, OSError):  # ended: the child is done, or lost with its actor
            with self._lock:
                self._open.pop(conn, None)
                if conn in self._new:
                    self._new.remove(conn)
            conn.close()
            if index is not None:
                self.closed.add(index)
        return index, messages

    def close(self) -> None:
        self._closing.set()
        if self._accepting.is_alive():  # a worker never connected: wake its accept to end it
            with contextlib.suppress(OSError):
                socket.create_connection(self.address, timeout=1.0).close()
            self._accepting.join(timeout=5.0)
        with self._lock:
            conns, self._new, self._open = self._new + list(self._open), [], {}
        for conn in conns:
            conn.close()
        self._listener.close()


class StreamQueue:
    """The child's end, used as worker_main's results queue: `put` returns at once and a
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
