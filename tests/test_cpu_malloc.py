"""glibc's allocator thresholds for CPU engines (engines.reference.cpu_malloc, `engine.cpu_malloc`).

The setting is process-wide, so each side runs in a fresh interpreter; page faults
(`ru_minflt`) are the independent witness of freed memory going back to the kernel.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engines.reference import ReferenceEngine
from engines.reference.cpu_malloc import _glibc
from engines.reference.options import ReferenceEngineConfig
from llmperf.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]

# The decode step's pattern: each layer gathers the batch's K and V into a padded buffer, one
# position longer every step (64 sequences x 160+ positions x 3 kv heads x 64, fp32: ~7.9 MB).
# Each new size is past glibc's dynamic mmap threshold (the largest block freed so far), so
# glibc maps fresh pages for it; tuned, the heap serves it and grows by the extra position.
FAULTS_PER_STEP = """
import resource, sys, torch
from engines.reference.cpu_malloc import apply_cpu_malloc
print(apply_cpu_malloc(sys.argv[1]))
def step(k):
    n = 64 * (160 + k) * 3 * 64
    tensors = [torch.ones(n), torch.ones(n)]
    del tensors
step(0)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for k in range(1, 11):
    step(k)
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10)
"""

needs_glibc = pytest.mark.skipif(_glibc() is None, reason="the C library is not glibc")


def _faults_per_step(choice: str) -> tuple[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", FAULTS_PER_STEP, choice], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], float(out[1])


@needs_glibc
def test_tuned_malloc_reuses_freed_memory_where_glibc_gives_it_back():
    default_setting, default_faults = _faults_per_step("default")
    tuned_setting, tuned_faults = _faults_per_step("tuned")
    assert (default_setting, tuned_setting) == ("default", "tuned")
    pages_per_step = 2 * 64 * 165 * 3 * 64 * 4 // 4096
    assert default_faults > 0.9 * pages_per_step  # every page of both buffers faulted in anew
    assert tuned_faults < pages_per_step / 10  # the freed memory reused; new pages only for growth


@needs_glibc
def test_the_engine_tunes_by_default_and_reports_it():
    assert ReferenceEngineConfig().cpu_malloc == "tuned"
    eng = ReferenceEngine(model="tiny", num_kv_blocks=8)
    assert eng.info()["cpu_malloc"] == "tuned"


def test_the_engine_reports_the_setting_in_effect_for_its_process():
    """`default` leaves glibc alone, and says so, unless an engine of the process tuned it."""
    script = (
        "from engines.reference import ReferenceEngine\n"
        "first = ReferenceEngine(model='tiny', num_kv_blocks=8, cpu_malloc='default').info()['cpu_malloc']\n"
        "ReferenceEngine(model='tiny', num_kv_blocks=8)\n"
        "print(first, ReferenceEngine(model='tiny', num_kv_blocks=8, cpu_malloc='default').info()['cpu_malloc'])\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    tuned = "default" if _glibc() is None else "tuned"
    assert out.stdout.split() == ["default", tuned]


def test_an_unknown_setting_is_one_clear_error():
    with pytest.raises(ConfigError, match="cpu_malloc"):
        ReferenceEngineConfig(cpu_malloc="jemalloc")
