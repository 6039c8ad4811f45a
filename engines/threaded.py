"""The thread machinery of an engine that runs its model beside the caller's asyncio loop.

The loop thread does the work (a scheduler step, a `generate` batch); callers on
any thread submit requests and abort them; each request's events reach its
caller's asyncio loop through an `EventChannel`. If the loop dies, every request
in flight, and every later one, fails with the reason instead of hanging.

A job is the engine's record of one request: it has `request_id`, `is_finished`,
`finish_reason`, `prompt_token_ids`, `output_token_ids` and `admitted_s` (when the
engine first scheduled it), and is ended by the engine's `_end`.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from typing import Any

from engines.base import Request, StepStat, TokenEvent
from engines.channel import EventChannel
from engines.openmp import release_openmp_pool


class ThreadedEngine(ABC):
    """Start, stop, submit, abort, death and delivery; subclasses say what one unit of work is."""

    loop_name = "step"  # for the error when the loop dies: "the engine's step loop died: ..."

    def __init__(self) -> None:
        self._lock = threading.Condition()  # guards the inbox, the live table and the flags
        self._inbox: list[Any] = []  # submitted, not yet taken by the loop
        self._live: dict[str, Any] = {}  # every job in flight, by request id
        self._running = False
        self._died: str | None = None  # why the loop died, if it did
        self._thread: threading.Thread | None = None
        self._steps: list[StepStat] = []  # appended by the loop thread, one per step

    # -- what an engine says -----------------------------------------------------------

    @abstractmethod
    def _make_job(self, request: Request, deliver: Callable[[TokenEvent], None]) -> Any:
        """The job for a request; its events go to `deliver`."""

    @abstractmethod
    def _job_error(self, job: Any) -> str | None:
        """Why the engine cannot take the job, or None."""

    @abstractmethod
    def _work(self) -> bool:
        """One unit of work, on the loop thread; False when there was nothing to run."""

    @abstractmethod
    def _end(self, job: Any, reason: str, error: str | None = None) -> None:
        """End a live job with a final event (reason "abort" or "error")."""

    @abstractmethod
    def _reject(self, job: Any, error: str) -> None:
        """Fail a job that never entered the engine."""

    def _abort_locked(self, request_id: str) -> Any | None:
        """Note an abort (the lock is held); return a job to end at once, or None."""
        job = self._live.get(request_id)
        if job is None or job not in self._inbox:
            return None
        self._inbox.remove(job)
        return job

    def _has_news_locked(self) -> bool:
        """Whether the idle loop has something new to look at (the lock is held)."""
        return bool(self._inbox)

    def _idle_timeout_s(self) -> float | None:
        """How long the idle loop may sleep before it must look again (the lock is held)."""
        return None

    def _stop_locked(self) -> None:
        """Stopping (the lock is held): tell the work in progress to end."""
        return

    # -- the Engine protocol -------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._running:
                return
            self._running = True
        # The loop thread opens torch's parallel regions from now on: a second OpenMP pool
        # beside the caller's would make every parallel op sleep and wake (engines/openmp.py).
        release_openmp_pool()
        self._thread = threading.Thread(target=self._loop, name=f"{self.name}-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._running = False
            self._inbox.clear()  # what waits here is live too, and is ended below
            self._stop_locked()
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        for job in list(self._live.values()):
            self._end(job, "abort")

    def is_alive(self) -> bool:
        """False once the loop has died (a server then answers 503 instead of hanging)."""
        return self._died is None

    def step_stats(self) -> list[StepStat]:
        return list(self._steps)

    async def stream(self, request: Request) -> AsyncIterator[TokenEvent]:
        channel = EventChannel()
        job = self._make_job(request, channel.deliver)
        self._submit(job)
        try:
            async for event in channel.events():
                yield event
        finally:
            if not job.is_finished:
                self.abort(request.id)

    def abort(self, request_id: str) -> None:
        with self._lock:
            job = self._abort_locked(request_id)
            self._lock.notify_all()
        if job is not None:
            self._end(job, "abort")

    @staticmethod
    def _event(
        job: Any, tokens: list[int], now: float, finished: bool, error: str | None = None, first: bool = False
    ) -> TokenEvent:
        """A job's event: its new tokens; counts on the final one, admission on the first."""
        return TokenEvent(
            request_id=job.request_id,
            token_ids=tuple(tokens),
            time_s=now,
            finished=finished,
            finish_reason=job.finish_reason if finished else None,
            error=error,
            num_prompt_tokens=len(job.prompt_token_ids) if finished else None,
            num_output_tokens=len(job.output_token_ids) if finished else None,
            scheduled_s=job.admitted_s if first else None,
        )

    # -- the loop --------------------------------------------------------------------------

    def _submit(self, job: Any) -> None:
        error = self._job_error(job)
        if error is None:
            with self._lock:  # a dying loop sets _died under this lock, then ends what is live
                error = self._died
                if error is None:
                    self._live[job.request_id] = job
                    self._inbox.append(job)
                    self._submitted_locked(job)
                    self._lock.notify_all()
                    return
        self._reject(job, error)

    def _submitted_locked(self, job: Any) -> None:
        """A job entered the inbox (the lock is held)."""
        return

    def _loop(self) -> None:
        try:
            self._run_loop()
        except BaseException as err:  # fail what is in flight instead of leaving it hanging
            message = f"the engine's {self.loop_name} loop died: {type(err).__name__}: {err}"
            with self._lock:
                self._running = False
                self._died = message
                self._inbox.clear()
            for job in list(self._live.values()):
                self._end(job, "error", message)
            raise

    def _run_loop(self) -> None:
        while True:
            with self._lock:
                if not self._running:
                    return
            if not self._work():
                with self._lock:
                    if self._running and not self._has_news_locked():
                        self._lock.wait(self._idle_timeout_s())
