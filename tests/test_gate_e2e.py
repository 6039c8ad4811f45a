"""The gate on real runs: a real slowdown (sequential batching against a continuous baseline) fails."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from hydra import compose, initialize_config_module
from rich.console import Console

from llmperf.run.config import load_config, register_configs
from llmperf.run.runner import run_benchmark

ROOT = Path(__file__).resolve().parents[1]


def run(folder: Path, *overrides: str) -> Path:
    register_configs()
    with initialize_config_module(config_module="scenarios", version_base="1.3"):
        config = load_config(compose("config", overrides=list(overrides)))
    run_benchmark(config, folder, argv=list(overrides), console=Console(file=io.StringIO()))
    return folder


def gate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmperf.gate", *args], cwd=ROOT, capture_output=True, text=True)


def test_sequential_batching_fails_against_a_continuous_baseline(tmp_path):
    common = ["scenario=offline", "scenario.num_requests=16", "scenario.output_tokens.value=32", "report.enabled=false",
              "scenario.validity.min_completed=16", "scenario.validity.min_duration_s=0"]
    continuous = run(tmp_path / "continuous", *common, "engine.batching=continuous")
    sequential = run(tmp_path / "sequential", *common, "engine.batching=sequential")
    baseline = tmp_path / "baseline.json"
    made = gate("--baseline", str(baseline), "--update", "--current", str(continuous),
                "--metric", "output_throughput_tps:-10%", "--metric", "ttft_s.p99:+25%",
                "--allow-dirty")  # the test's own checkout may hold uncommitted work
    assert made.returncode == 0, made.stderr
    same = gate("--baseline", str(baseline), "--current", str(continuous))
    assert same.returncode == 0, same.stdout
    slower = gate("--baseline", str(baseline), "--current", str(sequential), "--markdown", str(tmp_path / "gate.md"))
    assert slower.returncode == 1, slower.stdout
    assert "REGRESSION" in slower.stdout and "output_throughput_tps" in slower.stdout
    assert "REGRESSION" in (tmp_path / "gate.md").read_text()
