"""The start of one lockstep run: patch the engine's step to take turns, then run llmperf.

Run by `llmperf.gate.lockstep` as `python -c "...run_path(<this file>)" OVERRIDES` in a side's
tree, that side's code first on PYTHONPATH: it uses the standard library only, so it works on
any commit's code. LLMPERF_LOCKSTEP holds "IN_FD,OUT_FD,HOLDS,TIMEOUT_S,LOG": before each
step the run waits for the turn token on IN_FD (unless it holds it), after the step it writes
the token to OUT_FD, so two runs started on one CPU run their steps alternately. The wait
lies outside the step: the engine stamps the step's start inside the patched method. When the
peer's process ends its pipe ends close, the wait reads EOF and the run steps freely from
then on; a wait past TIMEOUT_S (a stuck peer) frees the run too, and closing its own ends
frees the peer. LOG gets a JSON line of counts when the run ends.
"""

import atexit
import json
import os
import runpy
import select
import sys
import time

ENV = "LLMPERF_LOCKSTEP"
MODULE, CLASS, METHOD = "engines.reference.engine", "ReferenceEngine", "_step_locked"
MISSING_EXIT = 2


class Turns:
    """One side of the turn token between two processes."""

    def __init__(self, in_fd: int, out_fd: int, holds: bool, timeout_s: float) -> None:
        self.in_fd, self.out_fd = in_fd, out_fd
        self.holding = holds
        self.timeout_s = timeout_s
        self.steps = 0  # calls of the step method
        self.turns = 0  # of those, taken in turn (token held)
        self.waited_s = 0.0
        self.free: str | None = None  # why this side stopped taking turns
        self.free_at_step: int | None = None

    def wrap(self, step):
        def step_in_turn(*args, **kwargs):
            self.wait()
            try:
                return step(*args, **kwargs)
            finally:
                self.hand_over()
        step_in_turn.__wrapped__ = step
        return step_in_turn

    def wait(self) -> None:
        if self.free is not None or self.holding:
            return
        start = time.perf_counter()
        try:
            ready, _, _ = select.select([self.in_fd], [], [], self.timeout_s)
            data = os.read(self.in_fd, 1) if ready else None
        except OSError:
            data = b""
        self.waited_s += time.perf_counter() - start
        if data is None:
            self.go_free(f"no turn from the peer in {self.timeout_s:g} s")
        elif not data:
            self.go_free("the peer ended")
        else:
            self.holding = True

    def hand_over(self) -> None:
        self.steps += 1
        if self.free is not None:
            return
        self.turns += 1
        try:
            os.write(self.out_fd, b"t")
        except OSError:  # the peer is gone (a broken pipe)
            self.go_free("the peer ended")
        self.holding = False

    def go_free(self, why: str) -> None:
        """Step freely from now on; closing both ends frees the peer too."""
        self.free, self.free_at_step = why, self.steps
        for fd in (self.in_fd, self.out_fd):
            try:
                os.close(fd)
            except OSError:
                pass

    def record(self) -> dict:
        return {"steps": self.steps, "turns": self.turns, "waited_s": round(self.waited_s, 6),
                "free": self.free, "free_at_step": self.free_at_step}


def patch(turns: Turns) -> None:
    """Wrap the engine's step method; one line naming --sequential and exit 2 where it is not."""
    try:
        module = __import__(MODULE, fromlist=[CLASS])
        cls = getattr(module, CLASS)
        step = getattr(cls, METHOD)
    except (ImportError, AttributeError) as e:
        sys.stderr.write(f"lockstep needs {MODULE}.{CLASS}.{METHOD}, which this code lacks"
                         f" ({e}); run with --sequential\n")
        sys.exit(MISSING_EXIT)
    setattr(cls, METHOD, turns.wrap(step))


def main() -> None:
    in_fd, out_fd, holds, timeout_s, log = os.environ.pop(ENV).split(",", 4)
    turns = Turns(int(in_fd), int(out_fd), holds == "1", float(timeout_s))

    def write_log() -> None:
        with open(log, "w", encoding="utf-8") as f:
            f.write(json.dumps(turns.record()) + "\n")

    atexit.register(write_log)
    patch(turns)
    runpy.run_module("llmperf", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
