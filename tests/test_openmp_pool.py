"""One OpenMP pool at a time (engines/openmp.py): the caller's pool is released before an
engine's loop thread opens its own. Each check runs in a fresh interpreter and counts the
process's threads in /proc/self/task, where a live pool's workers show."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engines.openmp import _runtime

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(
    not Path("/proc/self/task").is_dir() or _runtime() is None, reason="no /proc or no OpenMP runtime to pause"
)

THREADS = """
import os, sys, threading, time, torch
from engines.openmp import release_openmp_pool
torch.set_num_threads(2)

def threads():
    time.sleep(0.3)  # released workers exit on their own schedule
    return len(os.listdir("/proc/self/task"))

def parallel_op():
    torch.ones(1 << 22).mul_(2)  # an elementwise op past torch's grain size: an OpenMP region

base = threads()
parallel_op()
with_pool = threads()
released = release_openmp_pool() if sys.argv[1] == "release" else False
after = threads()
worker = threading.Thread(target=parallel_op)
worker.start()
worker.join()
print(base, with_pool, released, after, threads())
"""


def _counts(mode: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", THREADS, mode], cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_releasing_frees_the_callers_pool_and_a_later_thread_builds_its_own():
    base, with_pool, released, after, end = _counts("release")
    assert released == "True"
    assert int(with_pool) == int(base) + 1  # two threads a region: the caller and one pool worker
    assert int(after) == int(base)  # the worker has exited
    assert int(end) == int(base)  # the loop thread's pool went with the thread


def test_without_the_release_both_pools_stay():
    base, with_pool, released, after, end = _counts("keep")
    assert released == "False"
    assert int(after) == int(with_pool) == int(base) + 1  # the caller's pool outlives its use


def test_an_engine_releases_the_callers_pool_when_its_loop_starts():
    script = (
        "import os, time, torch\n"
        "from engines.reference import ReferenceEngine\n"
        "torch.set_num_threads(2)\n"
        "eng = ReferenceEngine(model='tiny', num_kv_blocks=8)\n"
        "torch.ones(1 << 22).mul_(2)\n"
        "time.sleep(0.3); before = len(os.listdir('/proc/self/task'))\n"
        "eng.start(); time.sleep(0.3)\n"
        "print(before, len(os.listdir('/proc/self/task')))\n"
        "eng.stop()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    before, running = map(int, done.stdout.split())
    assert running == before  # + the loop thread, - the caller's pool worker (idle loop: no pool yet)
