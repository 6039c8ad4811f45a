"""Lockstep pairs: the base's run and the head's at once, on one CPU, taking turns step by step.

Run one after the other, the two runs of a pair see the machine at different seconds, and a
shared machine's speed drifts within a second. In lockstep both runs start together, pinned to
the same CPU, and each engine step waits for a turn token the other side's previous step hands
over (lockstep_boot.py patches the reference engine's step method from outside, so any commit's
code takes part): the sides' steps alternate in the same millisecond-scale windows, and what
the machine does to one it does to the other.

What lockstep changes:
- A run's wall clock holds the other side's steps too, so wall-clock figures (throughput,
  request latency) of both sides come out alike whatever the steps cost: they are left out
  (WALL_CLOCK); step durations and step CPU times, and the counters, are judged as before.
- Work a side does between its steps (its client, its other threads) runs beside the other
  side's step on the one CPU: a change there lands on both sides' step times.
- It needs the reference engine's step method; a run that took no turn is an error naming
  --sequential.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from llmperf.gate.errors import GateError
from llmperf.gate.runs import Job, load_job
from llmperf.gate.sides import (
    DEFAULT_THREADS,
    RUN_TIMEOUT_S,
    Pair,
    Side,
    failed_run,
    pin,
    pin_cpus,
    run_command,
)

BOOT = Path(__file__).with_name("lockstep_boot.py")
LOCKSTEP, SEQUENTIAL = "lockstep", "sequential"
# Figures read off a run's wall clock, which in lockstep holds both sides' steps.
WALL_CLOCK = ("output_throughput_tps", "e2e_s.median")
# How long a step waits for its turn before the run steps freely: long enough for the other
# side's start-up (imports, model build, warmup) on a loaded machine, short of RUN_TIMEOUT_S.
TURN_TIMEOUT_S = 120.0
LOG = "lockstep.json"  # beside each run folder: pairN-base.lockstep.json


def boot_command(command: list[str]) -> list[str]:
    """`python -m llmperf ARGS` as `python -c <run the bootstrap> ARGS`: the working directory
    stays first on sys.path, as with -m."""
    if command[1:3] != ["-m", "llmperf"]:
        raise ValueError(f"not an llmperf run: {command[:3]}")
    start = f"import runpy; runpy.run_path({str(BOOT)!r}, run_name='__main__')"
    return [command[0], "-c", start, *command[3:]]


def run_pair(first: Side, second: Side, overrides: tuple[Sequence[str], Sequence[str]],
             folders: tuple[Path, Path], threads: int = DEFAULT_THREADS,
             turn_timeout_s: float = TURN_TIMEOUT_S) -> tuple[tuple[Job, Job], tuple[dict, dict]]:
    """`first` and `second` run at once, pinned to the same CPU(s), taking turns step by step,
    `first` holding the token at the start. Their jobs and their turn records (lockstep_boot)."""
    sides = (first, second)
    a_to_b, b_to_a = os.pipe(), os.pipe()
    ends = ((b_to_a[0], a_to_b[1]), (a_to_b[0], b_to_a[1]))  # (in, out) of each side
    logs = tuple(folder.with_name(f"{folder.name}.{LOG}") for folder in folders)
    cpus = pin_cpus(threads)
    for log in logs:
        log.parent.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    with contextlib.ExitStack() as stack:
        outputs = [(stack.enter_context(tempfile.TemporaryFile("w+")),
                    stack.enter_context(tempfile.TemporaryFile("w+"))) for _ in sides]
        try:
            try:
                for k, side in enumerate(sides):
                    command, env = run_command(side, overrides[k], folders[k], threads)
                    in_fd, out_fd = ends[k]
                    env["LLMPERF_LOCKSTEP"] = (f"{in_fd},{out_fd},{int(k == 0)},"
                                               f"{turn_timeout_s},{logs[k]}")
                    procs.append(subprocess.Popen(boot_command(command), cwd=side.root, env=env,
                                                  stdout=outputs[k][0], stderr=outputs[k][1],
                                                  text=True, pass_fds=ends[k]))
                    pin(procs[-1].pid, cpus)
            finally:
                for fd in (*a_to_b, *b_to_a):  # the children hold their own ends now
                    os.close(fd)
            deadline = time.monotonic() + RUN_TIMEOUT_S
            for k, proc in enumerate(procs):
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    raise GateError(f"the {sides[k].label} run took over {RUN_TIMEOUT_S} s:"
                                    f" {folders[k]}") from None
        finally:  # a failed start, a timeout, SIGTERM, Ctrl-C: the runs go with the gate
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        for k, proc in enumerate(procs):
            if proc.returncode != 0:
                stdout, stderr = (_read(f) for f in outputs[k])
                raise failed_run(sides[k], proc.returncode, stdout, stderr)
    records = tuple(_turns(log) for log in logs)
    for side, record in zip(sides, records, strict=True):
        if not record.get("turns"):
            raise GateError(f"the {side.label} run took no turn in lockstep (is the engine"
                            f" engine=reference?); run with --sequential")
    return (load_job(folders[0]), load_job(folders[1])), records


def run_pairs(base: Side, head: Side, overrides: Sequence[str], num_pairs: int, out: Path,
              head_overrides: Sequence[str] = (),
              on_run: Callable[[int, Side], None] | None = None,
              threads: int = DEFAULT_THREADS) -> tuple[list[Pair], list[dict]]:
    """`num_pairs` lockstep pairs, the base holding the first turn in even pairs and the head in
    odd ones; run folders out/pairN-base, out/pairN-head. The pairs and each pair's turn
    records ({"base": ..., "head": ...})."""
    pairs, records = [], []
    for i in range(num_pairs):
        first, second = (base, head) if i % 2 == 0 else (head, base)
        if on_run is not None:
            on_run(i, first)
        extra = {base.role: (), head.role: tuple(head_overrides)}
        jobs, turns = run_pair(first, second,
                               ([*overrides, *extra[first.role]], [*overrides, *extra[second.role]]),
                               (out / f"pair{i}-{first.role}", out / f"pair{i}-{second.role}"),
                               threads)
        by_role = {first.role: 0, second.role: 1}
        pairs.append((jobs[by_role["base"]], jobs[by_role["head"]]))
        records.append({role: turns[k] for role, k in by_role.items()})
    return pairs, records


def notes(records: Sequence[dict]) -> list[str]:
    """A line for every run that stopped taking turns before the other side ended."""
    lines = []
    for i, pair in enumerate(records):
        for role, record in pair.items():
            why = record.get("free")
            if why and why != "the peer ended":
                lines.append(f"pair {i + 1} {role}: left lockstep after {record['free_at_step']}"
                             f" steps: {why}")
    return lines


def _turns(log: Path) -> dict:
    try:
        return json.loads(log.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _read(f) -> str:
    f.seek(0)
    return f.read()
