"""The two sides of an A/B comparison and the interleaved runs of the same benchmark on each.

Each side runs its own code: `python -m llmperf` with the side's tree first on PYTHONPATH
and as the working directory, one process per run, so nothing of one side's import, warm
caches or allocator state leaks into the other. Pairs alternate their order (A B, B A,
A B, ...), so a drift of the machine over the job lands on both sides alike.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from llmperf.gate.errors import GateError
from llmperf.gate.runs import Job, load_job

# The benchmark of one run: a fixed, seeded offline workload on the tiny preset. About 1.5 s of
# measured load, over 100 decode steps of 16 sequences; the gated figures leave startup out.
DEFAULT_BENCHMARK: tuple[str, ...] = (
    "scenario=offline",
    "model=tiny",
    "engine=reference",
    "engine.batching=continuous",
    "engine.max_num_seqs=16",
    "scenario.num_requests=32",
    "scenario.prompt_tokens.value=64",
    "scenario.output_tokens.value=96",
    "scenario.validity.min_duration_s=0.5",
    "scenario.validity.min_completed=32",
    "telemetry.enabled=false",
)
RUN_TIMEOUT_S = 600
# Torch threads of each benchmark run. One: a decode step on all of a small machine's cores
# waits at every op for the slowest of them, so anything else on the machine (a second
# hyperthread's neighbour, the OS) stretches it; on one core, with the others left free, the
# runs of one commit varied about half as much here (docs/gate.md, "Calibration").
DEFAULT_THREADS = 1


def pin_cpus(threads: int) -> set[int] | None:
    """The last `threads` CPUs this process may use (the gate's own process and the OS keep
    the first), or None where there are no spare CPUs."""
    if not threads or not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return set(cpus[-threads:]) if len(cpus) > threads else None


@dataclass(frozen=True)
class Side:
    role: str  # "base" or "head"
    root: Path  # the tree whose code runs
    commit: str | None  # None: a working tree with uncommitted changes counted in
    label: str  # for tables: "base 2eca816" / "head (working tree at 2eca816)"


def run_command(side: Side, overrides: Sequence[str], folder: Path,
                threads: int = DEFAULT_THREADS) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of one llmperf run of `side` into `folder`: the side's
    tree first on PYTHONPATH, torch on `threads` threads (0: torch's default), PYTHONHASHSEED
    fixed. The command runs with the side's tree as its working directory."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(side.root), env.get("PYTHONPATH"))))
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    env["PYTHONHASHSEED"] = "0"  # the same dict and set orders in every run
    command = [sys.executable, "-m", "llmperf", *overrides, "report.enabled=false",
               f"hydra.run.dir={folder}"]
    return command, env


def pin(pid: int, cpus: set[int] | None) -> None:
    """Pin a started run (not in a preexec_fn: a SIGTERM that lands between fork and exec
    would be lost there, and the run would go on)."""
    if cpus is not None:
        with contextlib.suppress(OSError):  # it may have ended already
            os.sched_setaffinity(pid, cpus)


def failed_run(side: Side, returncode: int, stdout: str, stderr: str) -> GateError:
    lines = (stderr.strip() or stdout.strip() or "no output").splitlines()
    return GateError(f"the {side.label} run failed (exit {returncode}): {lines[-1]}")


def run_once(side: Side, overrides: Sequence[str], folder: Path,
             threads: int = DEFAULT_THREADS) -> Job:
    """One llmperf run of `side` into `folder` (run_command), pinned to `threads` of the
    machine's last CPUs; GateError with the run's last error line."""
    command, env = run_command(side, overrides, folder, threads)
    with subprocess.Popen(command, cwd=side.root, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        pin(proc.pid, pin_cpus(threads))
        try:
            stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise GateError(f"the {side.label} run took over {RUN_TIMEOUT_S} s: {folder}") from None
        except BaseException:  # SIGTERM, Ctrl-C: the run goes with the gate
            proc.kill()
            raise
    if proc.returncode != 0:
        raise failed_run(side, proc.returncode, stdout, stderr)
    return load_job(folder)


Pair = tuple[Job, Job]  # (base, head)


def fresh_folder(out: Path) -> Path:
    """`out` made absolute (each side runs in its own tree), checked to hold nothing yet: runs
    are never mixed with an earlier job's files."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise GateError(f"{out} already exists and is not empty; give a new --out folder")
    return out.resolve()


@contextlib.contextmanager
def terminated_as_exit() -> Iterator[None]:
    """SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, so temporary worktrees are removed."""
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_pairs(base: Side, head: Side, overrides: Sequence[str], num_pairs: int, out: Path,
              head_overrides: Sequence[str] = (),
              on_run: Callable[[int, Side], None] | None = None,
              threads: int = DEFAULT_THREADS) -> list[Pair]:
    """`num_pairs` pairs, A B then B A alternately; run folders out/pairN-base, out/pairN-head."""
    pairs = []
    for i in range(num_pairs):
        order = (base, head) if i % 2 == 0 else (head, base)
        jobs = {}
        for side in order:
            if on_run is not None:
                on_run(i, side)
            extra = head_overrides if side is head else ()
            jobs[side.role] = run_once(side, [*overrides, *extra], out / f"pair{i}-{side.role}",
                                       threads)
        pairs.append((jobs["base"], jobs["head"]))
    return pairs
