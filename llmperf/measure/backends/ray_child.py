"""The ray backend's load in a child process of its actor (backends/ray_actors.py).

The actor starts the process the local-processes backend starts (llmperf/measure/worker_process.py:
spawned, `worker_main` with a results queue, a control queue, a go event and a start value)
and only passes messages on: the child's, read from its pipe by the coordinator's `take`
and returned still pickled (the coordinator unpickles them, as it does a local worker's),
and the coordinator's control messages and start into the child. The load generator's loop
then runs in a process like a local worker's, with none of Ray's threads (gRPC, the calls'
executor threads, the event stats) beside it on its GIL; Ray still places the actor, counts
its node's resources and notices a lost node.

- **Its clock is the actor's.** The child stamps its records from `time.time_ns()` and
  `time.perf_counter()` as a local worker does; CLOCK_REALTIME and CLOCK_MONOTONIC are
  host-wide, so the offset the coordinator measures against the actor's `now_ns` is the
  child's (tests/test_ray_child.py reads both).
- **It dies with its actor.** On Linux the child asks for SIGKILL when the thread that
  started it ends (PR_SET_PDEATHSIG), so a killed actor (`ray.kill`, a lost node) leaves no
  load running; the coordinator records its in-flight requests as `worker lost`.
- **Its priority is the actor's:** it inherits the nice of the thread that starts it, which
  took the coordinator's first.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.connection
import multiprocessing.queues
import os
import pickle
import queue
import sys
import threading
import time
from collections.abc import Callable

from llmperf.measure.worker_process import WorkerSpec, child_main

EXIT_WAIT_S = 30.0  # after its "done", the child's exit (its queues flushed) is waited this long


class RelayQueue(multiprocessing.queues.Queue):
    """The child's results queue; the actor reads each message as the bytes the child's
    feeder thread pickled, without unpickling them."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx=ctx)

    def reader(self):
        """The pipe's reading end (a Connection), to wait on."""
        return self._reader

    def get_pickled(self, timeout: float) -> bytes:
        """The next message, pickled; queue.Empty after `timeout`. One reader only."""
        if not self._reader.poll(timeout):
            raise queue.Empty
        message = self._reader.recv_bytes()
        self._sem.release()
        return message


class ChildLoad:
    """One worker's load in a spawned child; the actor's side of its queues.

    Its messages are read by `drain`, which the actor's `take` calls: the child's pipe is read
    when the coordinator asks, one wakeup of the actor per take. With `relay` (the design
    before, `LLMPERF_RAY_RELAY=thread`), `run`'s thread reads them as they come instead, one
    wakeup per message, and `drain` finds them posted. The child's feeder thread, not its
    loop, waits while the pipe is full."""

    def __init__(self, relay: bool = False, stream: tuple | None = None) -> None:
        self._ctx = mp.get_context("spawn")
        self.stream = stream  # (address, key): the child sends its messages there (record_stream.py)
        self._results = RelayQueue(self._ctx)
        self._control = self._ctx.Queue()
        self._go = self._ctx.Event()
        self._start_at = self._ctx.Value("d", 0.0)
        self.relay = relay
        self._reading = threading.Lock()  # one reader of the pipe at a time
        self._ended = False  # its "done" or "failed" was read, or its exit posted as failed
        self._process = None
        self.pid: int | None = None

    def tell(self, message: tuple) -> None:
        self._control.put(message)

    def set_start(self, start_s: float) -> None:
        self._start_at.value = start_s
        self._go.set()

    def run(self, spec: WorkerSpec, post: Callable[[bytes], None],
            started: Callable[[], object] = lambda: None) -> str | None:
        """Starts the child, calls `started`, and returns once the child has exited (killed
        if it outlives its "done" or "failed" by EXIT_WAIT_S); one that exits without either
        is posted as failed. With a `stream` its messages go to the coordinator and none come
        here: what is returned is why it failed (it could not connect, or exited with an
        error), else None."""
        child = self._ctx.Process(
            target=child_main,
            args=(os.getpid(), spec, self._results, self._control, self._go, self._start_at,
                  self.stream),
            name=f"llmperf-worker-{spec.index}", daemon=True)
        with _bare_main():
            child.start()
        self._process, self.pid = child, child.pid
        started()
        try:
            while self.relay and not self._ended and child.is_alive():
                self.drain(post, 0.5)
            deadline = None
            while not mp.connection.wait([child.sentinel], timeout=1.0):
                if self._ended:
                    deadline = deadline or time.monotonic() + EXIT_WAIT_S
                    if time.monotonic() > deadline:
                        child.kill()
        finally:
            child.join()
        if self.stream is not None:  # the pipe holds only a failure to connect
            told: list[bytes] = []
            self._read(told.append)
            if told:
                return (pickle.loads(told[-1])[2] + "; LLMPERF_RAY_RELAY=take carries them in "
                        "Ray's calls instead")
            return None if child.exitcode == 0 else (
                f"load worker process exited with code {child.exitcode}")
        with self._reading:  # what it left in the pipe, then its exit if it said nothing
            self._read(post)
            if not self._ended:
                self._ended = True
                post(pickle.dumps(("failed", spec.index,
                                   f"load worker process exited with code {child.exitcode}")))
        return None

    def drain(self, post: Callable[[bytes], None], wait_s: float) -> None:
        """Every message in the child's pipe to `post`, pickled as the child sent them, in
        order; waits up to `wait_s` for the first (or the child's exit: `run` posts it)."""
        with self._reading:
            if self._ended:
                return
            waits = [self._results.reader()]
            if self._process is not None:
                waits.append(self._process.sentinel)
            if wait_s > 0:
                mp.connection.wait(waits, timeout=wait_s)
            self._read(post)

    def _read(self, post: Callable[[bytes], None]) -> None:
        while not self._ended:
            try:
                message = self._results.get_pickled(timeout=0.0)
            except queue.Empty:
                return
            post(message)
            self._ended = message_kind(message) in ("done", "failed")


def message_kind(pickled: bytes) -> str:
    """The kind of a pickled (kind, index, payload) message. A batch of records, nearly every
    message, is told by its first string (the kind, in the pickle's first bytes) and stays
    unread; the few others are unpickled."""
    if b"\x8c\x07records" in pickled[:32]:
        return "records"
    return pickle.loads(pickled)[0]


@contextlib.contextmanager
def _bare_main():
    """spawn runs the parent's main script again in the child before the target; a Ray
    worker's is Ray's default_worker.py, whose imports (all of Ray) take seconds and which the
    child does not need. Hidden while the child starts (its preparation data is read in
    start()), restored after."""
    main = sys.modules.get("__main__")
    hidden = main is not None and getattr(main, "__spec__", None) is None and "__file__" in vars(main)
    path = vars(main).pop("__file__") if hidden else None
    try:
        yield
    finally:
        if hidden:
            main.__file__ = path
