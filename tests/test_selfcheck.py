"""`llmperf-selfcheck --gpu`: one JSON object; on a machine without a GPU every figure is
skipped, and the command still succeeds."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from llmperf.selfcheck.cli import main
from llmperf.selfcheck.gpu import CHECKS, SKIPPED_NO_GPU, run_checks

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_without_a_gpu_every_figure_reads_skipped():
    assert run_checks(has_gpu=lambda: False) == {name: SKIPPED_NO_GPU for name in CHECKS}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answer")
def test_module_prints_json_with_every_figure_skipped_and_exits_0_on_cpu():
    done = subprocess.run(
        [sys.executable, "-m", "llmperf.selfcheck", "--gpu"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert set(figures) == set(CHECKS)
    assert all(value == SKIPPED_NO_GPU for value in figures.values())


def test_a_failing_check_is_reported_and_the_others_still_run(monkeypatch):
    def broken():
        raise RuntimeError("boom")

    monkeypatch.setitem(CHECKS, "device", broken)
    monkeypatch.setitem(CHECKS, "decode", lambda: {"batch1": {"output_tps": 1.0}})
    figures = run_checks(["device", "decode"], has_gpu=lambda: True)
    assert figures == {"device": "error: RuntimeError: boom", "decode": {"batch1": {"output_tps": 1.0}}}


def test_bad_arguments_exit_2(capsys):
    assert main([]) == 2
    assert main(["--gpu", "--only", "nope"]) == 2
    assert "valid: device" in capsys.readouterr().err


@pytest.mark.gpu
@needs_gpu
def test_device_and_attention_figures_on_a_gpu():
    figures = run_checks(["device", "attention"])
    assert figures["device"]["memory_total_bytes"] > 0
    for shape in figures["attention"].values():
        assert shape["triton_s"] > 0 and shape["sdpa_s"] > 0


@pytest.mark.gpu
@pytest.mark.slow
@needs_gpu
def test_every_gpu_figure_runs():
    figures = run_checks()
    errors = {name: value for name, value in figures.items() if isinstance(value, str)}
    assert not errors
    assert figures["decode"]["batch1"]["mbu"] > 0
