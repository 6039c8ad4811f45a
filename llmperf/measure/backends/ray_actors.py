"""The Ray actors of the ray backend (ray_pool.py): the mailbox that carries the messages
between the coordinator and the workers, and the worker that runs one share of the load
(llmperf/measure/workers.py's worker_main) while answering clock probes."""

from __future__ import annotations

import queue
import time
from dataclasses import replace

from llmperf.measure.workers import WorkerSpec, worker_main


def actor_classes(ray):
    """The Mailbox and LoadWorker actor classes (made once ray is imported)."""
    global _CLASSES
    if _CLASSES is None:
        _CLASSES = (ray.remote(num_cpus=0)(Mailbox), ray.remote(max_concurrency=2)(LoadWorker))
    return _CLASSES


_CLASSES = None


class Mailbox:
    """Messages between the coordinator and the workers (one actor for all of them)."""

    def __init__(self, workers: int) -> None:
        self._to_coordinator: list[tuple] = []
        self._to_worker: list[list[tuple]] = [[] for _ in range(workers)]
        self._start_s: float | None = None

    def post(self, message: tuple) -> None:
        self._to_coordinator.append(message)

    def collect(self) -> list[tuple]:
        messages, self._to_coordinator = self._to_coordinator, []
        return messages

    def tell_all(self, message: tuple, but: int | None) -> None:
        for i, box in enumerate(self._to_worker):
            if i != but:
                box.append(message)

    def take(self, worker: int) -> list[tuple]:
        messages, self._to_worker[worker] = self._to_worker[worker], []
        return messages

    def set_start(self, start_s: float) -> None:
        self._start_s = start_s

    def start_s(self) -> float | None:
        return self._start_s


class LoadWorker:
    """One load generator on a node: `run` drives its share (llmperf/measure/workers.py's
    worker_main) while `now_ns` answers clock probes on a second thread."""

    def __init__(self, test_clock_offset_s: float = 0.0) -> None:
        self._shift_ns = round(test_clock_offset_s * 1e9)

    def now_ns(self) -> int:
        """This worker's wall clock (shifted by the test-only offset)."""
        return time.time_ns() + self._shift_ns

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def run(self, spec: WorkerSpec, mailbox) -> None:
        # spec.origin_unix_ns is on this worker's clock; worker_main reads the host's own
        spec = replace(spec, origin_unix_ns=spec.origin_unix_ns - self._shift_ns)
        start = _Start(mailbox)
        worker_main(spec, _Outbox(mailbox), _Inbox(mailbox, spec.index), start, start)


class _Outbox:
    """worker_main's results queue: a post to the mailbox (in order, not awaited)."""

    def __init__(self, mailbox) -> None:
        self._mailbox = mailbox

    def put(self, message: tuple) -> None:
        self._mailbox.post.remote(message)


class _Inbox:
    """worker_main's control queue: get_nowait() over the mailbox's messages for it. It runs
    on the load generator's loop, so it never waits on the mailbox: one `take` is always
    under way, and a poll only looks whether it has come back."""

    def __init__(self, mailbox, worker: int) -> None:
        import ray

        self._ray, self._mailbox, self._worker = ray, mailbox, worker
        self._pending: list[tuple] = []
        self._asked = mailbox.take.remote(worker)

    def get_nowait(self) -> tuple:
        if not self._pending:
            ready, _ = self._ray.wait([self._asked], timeout=0)
            if ready:
                self._pending = self._ray.get(self._asked)
                self._asked = self._mailbox.take.remote(self._worker)
        if not self._pending:
            raise queue.Empty
        return self._pending.pop(0)


class _Start:
    """worker_main's go event and start time: wait() until the coordinator sets the start."""

    def __init__(self, mailbox) -> None:
        self._mailbox = mailbox
        self.value = 0.0

    def wait(self) -> None:
        import ray

        while (start_s := ray.get(self._mailbox.start_s.remote())) is None:
            time.sleep(0.01)
        self.value = start_s
