"""The Ray actor of the ray backend (ray_pool.py): the worker that runs one share of the load
(llmperf/measure/worker_process.py's worker_main) while its other threads answer the coordinator.
The load runs in a child process of the actor, as a local worker's does (backends/
ray_child.py); with `LLMPERF_RAY_LOAD=actor` it runs on one of the actor's own threads
instead, beside Ray's, the design before (docs/sizing.md compares the two).

The load generator's loop makes no Ray call. Its messages (the priority it got, batches of
records every RECORDS_FLUSH_S, ready, saturated, done, failed) go from the child straight to
the coordinator on a connection of their own (record_stream.py, the default), and what `run`
returns is only why the child failed, if it did. With `LLMPERF_RAY_RELAY=take` they wait in
the child's pipe, or,
from this process, in the actor's own outbox (a list under a lock); the coordinator keeps
one `take` call waiting, which every POLL_S (ray_pool.py) reads the pipe and returns them
all, pickled (a child's as its queue pickled them), while there are any: one wakeup of the
actor per take, none per message (`LLMPERF_RAY_RELAY=thread` has a thread relay each as it
comes instead, the design before). Its control messages (stop sending, interrupt, another
worker's saturation) and the measured phase's start arrive as calls on those other threads
too, which pass them on to the child's queues (or leave them in memory for a loop on the
actor's thread). A Ray call submitted from the loop took 0.6-1.0 ms at the median and 3-4 ms
at the p99 there, a put into the outbox 0.02-0.05 ms.

The load runs at the coordinator's priority, not Ray's: a raylet starts its workers
`worker_niceness` (15 by default) nicer than itself, and on a host the coordinator shares
with them, its turns then preempt the workers' loops (docs/sizing.md has the measurement).
"""

from __future__ import annotations

import collections
import os
import pickle
import queue
import threading
import time
from dataclasses import replace

from llmperf.measure.backends.ray_child import ChildLoad
from llmperf.measure.backends.ray_yield import each_thread, resume_threads, yield_threads
from llmperf.measure.worker_process import WorkerSpec, worker_main

LOAD_IN = ("child", "actor")  # where an actor runs its load: LLMPERF_RAY_LOAD, the first by default

# One thread runs the load; the others: the coordinator's waiting `take`, a clock probe and a
# control message, none of them queued behind another.
THREADS = 4


def actor_class(ray):
    """The LoadWorker actor class (made once ray is imported)."""
    global _CLASS
    if _CLASS is None:
        _CLASS = ray.remote(max_concurrency=THREADS)(LoadWorker)
    return _CLASS


_CLASS = None


class LoadWorker:
    """One load generator on a node: `run` drives its share (llmperf/measure/worker_process.py's
    worker_main) in a child process (`in_child`) or on this thread; `take`, `tell`,
    `set_start` and `now_ns` answer the coordinator."""

    def __init__(self, test_clock_offset_s: float = 0.0, in_child: bool = True,
                 relay: bool = False, stream: tuple | None = None) -> None:
        self._shift_ns = round(test_clock_offset_s * 1e9)
        self._child = ChildLoad(relay, stream) if in_child else None
        self._outbox: list[tuple | bytes] = []
        self._posted = threading.Condition()
        self._last_take = 0.0  # time.monotonic() when the coordinator last took them
        self._control: collections.deque[tuple] = collections.deque()
        self._start = _Start()

    def now_ns(self) -> int:
        """This worker's wall clock (shifted by the test-only offset)."""
        return time.time_ns() + self._shift_ns

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def pid(self) -> int:
        return os.getpid()

    def prioritize(self, nice: int) -> int:
        """Every thread of the actor at `nice` (take_priority; the coordinator's), before the
        first clock probes: at the raylet's worker_niceness they would answer late on a busy
        host. Threads started later, the load's child among them, inherit it; the actor is
        killed after the run, so nothing is restored."""
        return take_priority(nice)

    def child_pid(self) -> int | None:
        """The child process running the load, once started (None on this thread)."""
        return self._child.pid if self._child is not None else None

    def run(self, spec: WorkerSpec) -> str | None:
        """worker_main in the child (started from this thread, whose nice, `prioritize`'s, it
        inherits) or on this thread: the loop's priority goes to the coordinator in a
        message. A child that streams its records leaves the actor nothing to do but wait:
        once it has started, every thread of the actor moves to SCHED_IDLE
        (backends/ray_yield.py), the child keeping its own class, and back once the child
        has ended (the last clock probes)."""
        streamed = self._child is not None and self._child.stream is not None
        if not streamed:  # a streaming child reports its own
            self.put(("priority", spec.index, os.getpriority(os.PRIO_PROCESS, 0)))
        # spec.origin_unix_ns is on this worker's clock; worker_main reads the host's own
        spec = replace(spec, origin_unix_ns=spec.origin_unix_ns - self._shift_ns)
        if self._child is not None:  # streamed: the actor only waits, and yields its cores
            try:
                return self._child.run(spec, self.put, yield_threads if streamed else lambda: None)
            finally:
                if streamed:
                    resume_threads()
        worker_main(spec, self, _Inbox(self._control), self._start, self._start)
        return None

    def put(self, message: tuple | bytes) -> None:
        """A message for the coordinator: from the child, pickled (read as it came); on this
        thread, worker_main's results queue on the load generator's loop (no pickling, no
        call)."""
        with self._posted:
            self._outbox.append(message)
            self._posted.notify()

    def take(self, wait_s: float, every_s: float) -> bytes:
        """The messages posted since the last take and those in the child's pipe, in order,
        pickled: no sooner than `every_s` after the last take (a batch of batches: one wakeup
        of this thread and of the coordinator per `every_s`, not per message), then as soon
        as there is one, or none after `wait_s`. A message from the child stays as it came,
        pickled: the coordinator unpickles it (`taken`)."""
        time.sleep(max(0.0, self._last_take + every_s - time.monotonic()))
        read_here = self._child is not None and not self._child.relay
        if read_here:  # the child's pipe, waiting on it if nothing else is posted
            self._child.drain(self.put, 0.0 if self._outbox else wait_s)
        with self._posted:
            if not self._outbox and not read_here:
                self._posted.wait(wait_s)
            messages, self._outbox = self._outbox, []
        self._last_take = time.monotonic()
        return pickle.dumps(messages, protocol=pickle.HIGHEST_PROTOCOL)

    def tell(self, message: tuple) -> None:
        if self._child is not None:
            self._child.tell(message)
        else:
            self._control.append(message)

    def set_start(self, start_s: float) -> None:
        if self._child is not None:
            self._child.set_start(start_s)
        else:
            self._start.set(start_s)


def taken(reply: bytes) -> list[tuple]:
    """What one `take` returned: its messages, each (kind, worker, payload), in order."""
    return [pickle.loads(m) if isinstance(m, bytes) else m for m in pickle.loads(reply)]


def take_priority(nice: int) -> int:
    """Every thread of this process at `nice` (threads started later inherit their starter's);
    the calling thread's nice after. Lowering a priority is always allowed; raising one needs
    CAP_SYS_NICE or room under RLIMIT_NICE, and where that is refused a thread keeps its own.
    Linux only (per-thread nice through /proc/self/task); elsewhere nothing changes."""
    each_thread(lambda tid: os.setpriority(os.PRIO_PROCESS, tid, nice))
    return os.getpriority(os.PRIO_PROCESS, 0)


class _Inbox:
    """worker_main's control queue: get_nowait() over the messages `tell` left."""

    def __init__(self, control: collections.deque) -> None:
        self._control = control

    def get_nowait(self) -> tuple:
        try:
            return self._control.popleft()
        except IndexError:
            raise queue.Empty from None


class _Start:
    """worker_main's go event and start time: wait() until the coordinator sets the start."""

    def __init__(self) -> None:
        self._set = threading.Event()
        self.value = 0.0

    def set(self, start_s: float) -> None:
        self.value = start_s
        self._set.set()

    def wait(self) -> None:
        self._set.wait()
