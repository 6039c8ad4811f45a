import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from llmperf.gate.baseline import Baseline
from llmperf.gate.cli import main
from tests.test_gate_support import step, summary, write_run, write_sweep

ROOT = Path(__file__).resolve().parents[1]

CONTINUOUS = "engine.batching=continuous"
STATIC = "engine.batching=static"
# What a CI baseline lists: raw figures with tolerances wider than their noise, and figures
# the machine's load cannot move (a within-sweep ratio, work counts from steps.jsonl).
CI_METRICS = [
    f"output_throughput_tps@{CONTINUOUS}:-10%",
    f"ttft_s.p99@{CONTINUOUS}:+30%",
    f"output_throughput_tps@{CONTINUOUS}/{STATIC}:-10%",
    f"steps.padded_fraction@{STATIC}:+0.02",
    f"steps.tokens_per_step@{CONTINUOUS}:-5%",
]
# A seeded workload gives the same steps every run: 4 sequences decoding together under
# continuous batching; static batching pads 16 of every 80 slots.
CONTINUOUS_STEPS = [step("prefill", 4, 64, 0)] + [step("decode", 4, 0, 4)] * 15
STATIC_STEPS = [step("prefill", 4, 64, 0, padded=16)] + [step("decode", 4, 0, 4, padded=1)] * 15


def draw_sweep(folder: Path, rng: np.random.Generator, continuous_tps: float = 100.0,
               static_tps: float = 40.0) -> Path:
    """A continuous/static sweep on a shared machine: a load factor common to both jobs
    (10% spread from run to run), 3% jitter per job, and a p99 TTFT that wanders 15%."""
    machine = rng.lognormal(0.0, 0.10)
    jobs = {
        CONTINUOUS: summary(continuous_tps * machine * rng.lognormal(0.0, 0.03),
                            ttft_p99_s=0.5 / machine * rng.lognormal(0.0, 0.15)),
        STATIC: summary(static_tps * machine * rng.lognormal(0.0, 0.03), batching="static",
                        ttft_p99_s=1.5 / machine * rng.lognormal(0.0, 0.15)),
    }
    return write_sweep(folder, jobs, {CONTINUOUS: CONTINUOUS_STEPS, STATIC: STATIC_STEPS})


def gate(*args: str | Path) -> int:
    return main([str(a) for a in args])


def currents(paths: list[Path]) -> list[str]:
    return [arg for p in paths for arg in ("--current", str(p))]


def row_of(out: str, metric: str) -> list[str]:
    [line] = [ln for ln in out.splitlines() if ln.startswith(metric + " ")]
    return line.split()


def markdown_rows(md: Path) -> list[list[str]]:
    rows = [line.strip("|").split("|") for line in md.read_text().splitlines()
            if line.startswith("| `")]
    return [[cell.strip() for cell in row] for row in rows]


def test_ten_gate_runs_on_unchanged_figures_all_pass(tmp_path, capsys):
    rng = np.random.default_rng(2024)
    baseline = tmp_path / "ci-cpu.json"
    repeats = [draw_sweep(tmp_path / f"base{i}", rng) for i in range(5)]
    metric_args = [arg for m in CI_METRICS for arg in ("--metric", m)]
    assert gate("--baseline", baseline, *currents(repeats), *metric_args, "--update") == 0
    capsys.readouterr()

    verdicts = []
    md = tmp_path / "gate.md"
    for run in range(10):
        paths = [draw_sweep(tmp_path / f"run{run}-{i}", rng) for i in range(3)]
        assert gate("--baseline", baseline, *currents(paths), "--markdown", md) == 0
        verdicts += [cells[-1] for cells in markdown_rows(md)]
    assert "REGRESSION" not in verdicts
    # The noise did push some medians past their tolerance; the noise band kept them passing.
    assert "pass (within noise)" in verdicts


def test_thirty_percent_lower_throughput_fails_with_a_clear_table(tmp_path, capsys):
    base = write_run(tmp_path / "base", summary(output_throughput_tps=100.0))
    slow = write_run(tmp_path / "slow", summary(output_throughput_tps=70.0))
    baseline = tmp_path / "b.json"
    gate("--baseline", baseline, "--current", base, "--update",
         "--metric", "output_throughput_tps:-5%", "--metric", "ttft_s.p99:+10%")
    capsys.readouterr()

    md = tmp_path / "gate.md"
    assert gate("--baseline", baseline, "--current", slow, "--markdown", md) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["metric", "baseline", "current", "change", "tolerance",
                                "noise", "band", "verdict"]
    assert row_of(out, "output_throughput_tps") == [
        "output_throughput_tps", "100", "70", "-30.0%", "-5%", "—", "REGRESSION"]
    assert row_of(out, "ttft_s.p99") == ["ttft_s.p99", "0.5", "0.5", "+0.0%", "+10%", "—", "pass"]
    assert lines[-1] == "FAIL: 1 of 2 metrics regressed"
    text = md.read_text()
    assert text.startswith("### llmperf-gate ❌ FAIL: 1 of 2 metrics regressed")
    assert ("| `output_throughput_tps` | 100 | 70 | -30.0% | -5% | — | **REGRESSION** |"
            in text)
    assert "scenario chat, engine reference, model tiny, hardware cpu" in text


def test_sequential_run_against_a_continuous_baseline_fails(tmp_path, capsys):
    baseline = tmp_path / "b.json"
    gate("--baseline", baseline, "--update", "--metric", "output_throughput_tps:-10%",
         "--current", write_run(tmp_path / "cont", summary(100.0, ttft_p99_s=0.5)))
    sequential = write_run(tmp_path / "seq", summary(31.0, ttft_p99_s=4.0, batching="sequential"))
    assert gate("--baseline", baseline, "--current", sequential,
                "--metric", "ttft_s.p99:+20%") == 2  # not in the baseline: a usage error
    assert "has no values for ttft_s.p99" in capsys.readouterr().err
    assert gate("--baseline", baseline, "--current", sequential) == 1
    assert row_of(capsys.readouterr().out, "output_throughput_tps")[3:] == [
        "-69.0%", "-10%", "—", "REGRESSION"]


def test_collapsed_continuous_static_ratio_fails_even_on_a_faster_machine(tmp_path, capsys):
    ratio = f"output_throughput_tps@{CONTINUOUS}/{STATIC}"
    raw = f"output_throughput_tps@{CONTINUOUS}"
    baseline = tmp_path / "b.json"
    gate("--baseline", baseline, "--update", "--metric", f"{ratio}:-10%", "--metric", f"{raw}:-10%",
         "--current", write_sweep(tmp_path / "base", {CONTINUOUS: summary(100.0),
                                                      STATIC: summary(40.0, batching="static")}))
    capsys.readouterr()
    # continuous batching broken, but this machine runs everything twice as fast
    broken = write_sweep(tmp_path / "now", {CONTINUOUS: summary(110.0),
                                            STATIC: summary(80.0, batching="static")})
    assert gate("--baseline", baseline, "--current", broken) == 1
    out = capsys.readouterr().out
    assert row_of(out, ratio) == [ratio, "2.5", "1.375", "-45.0%", "-10%", "—", "REGRESSION"]
    assert row_of(out, raw)[3:] == ["+10.0%", "-10%", "—", "pass"]


def test_improvement_beyond_tolerance_asks_for_a_baseline_update(tmp_path, capsys):
    baseline = tmp_path / "b.json"
    gate("--baseline", baseline, "--update", "--metric", "output_throughput_tps:-5%",
         "--current", write_run(tmp_path / "base", summary(100.0)))
    capsys.readouterr()
    md = tmp_path / "gate.md"
    assert gate("--baseline", baseline, "--current", write_run(tmp_path / "fast", summary(130.0)),
                "--markdown", md) == 0
    out = capsys.readouterr().out
    assert row_of(out, "output_throughput_tps")[1:] == [
        "100", "130", "+30.0%", "-5%", "—", "improved", "—", "update", "the", "baseline"]
    assert out.splitlines()[-1] == (
        "PASS: no regression in 1 metrics; 1 improved beyond tolerance, update the baseline")
    assert md.read_text().startswith("### llmperf-gate ✅ PASS")


def test_update_round_trips_values_tolerances_and_origin(tmp_path, capsys):
    baseline = tmp_path / "baselines" / "ci.json"
    runs = [write_run(tmp_path / f"r{i}", summary(tps, git_commit="abc123"), steps=STATIC_STEPS)
            for i, tps in enumerate([98.0, 100.0, 103.0])]
    assert gate("--baseline", baseline, *currents(runs), "--update",
                "--metric", "output_throughput_tps:5%",
                "--metric", "steps.padded_fraction:+0.02") == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"wrote {baseline}: 2 metrics from 3 repeats"

    written = json.loads(baseline.read_text())
    assert written["kind"] == "llmperf-gate-baseline" and written["schema_version"] == 1
    assert written["metrics"]["output_throughput_tps"] == {
        "direction": "higher", "tolerance": "-5%", "values": [98.0, 100.0, 103.0]}
    padded = (16 + 15) / (16 + 15 + 64 + 60)
    assert written["metrics"]["steps.padded_fraction"]["values"] == pytest.approx([padded] * 3)
    assert written["metrics"]["steps.padded_fraction"]["tolerance"] == "+0.02"
    source = written["source"]
    assert source["git_commit"] == "abc123"
    assert source["runs"] == [str(r) for r in runs]
    assert source["scenario"] == summary()["scenario"] and source["model"] == {"name": "tiny"}
    assert datetime.fromisoformat(written["created"]).tzinfo is not None
    assert Baseline.load(baseline).to_dict() == written

    assert gate("--baseline", baseline, *currents(runs)) == 0
    out = capsys.readouterr().out
    row = row_of(out, "output_throughput_tps")
    assert row[1:6] == ["100", "(n=3)", "100", "(n=3)", "+0.0%"] and row[-1] == "pass"

    # updating again without --metric keeps the metric list and tolerances
    newer = [write_run(tmp_path / f"n{i}", summary(tps), steps=STATIC_STEPS)
             for i, tps in enumerate([120.0, 118.0])]
    assert gate("--baseline", baseline, *currents(newer), "--update") == 0
    again = json.loads(baseline.read_text())
    assert again["metrics"]["output_throughput_tps"] == {
        "direction": "higher", "tolerance": "-5%", "values": [120.0, 118.0]}
    assert list(again["metrics"]) == ["output_throughput_tps", "steps.padded_fraction"]


def _run_module(*args: str | Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "llmperf.gate", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)


def test_module_entry_point_exits_0_on_pass_and_1_on_regression(tmp_path):
    baseline = tmp_path / "b.json"
    base = write_run(tmp_path / "base", summary(100.0))
    assert _run_module("--baseline", baseline, "--current", base, "--update",
                       "--metric", "output_throughput_tps:-5%").returncode == 0
    assert _run_module("--baseline", baseline, "--current", base).returncode == 0
    slow = _run_module("--baseline", baseline, "--current", write_run(tmp_path / "s", summary(70.0)))
    assert slow.returncode == 1
    assert "REGRESSION" in slow.stdout


@pytest.mark.parametrize("case, message", [
    ("missing path", "run folder not found: "),
    ("missing baseline", "baseline not found: "),
    ("schema mismatch", "schema_version 2, this gate reads 1"),
    ("unknown metric", "unknown metric 'ttft_p99' (did you mean 'ttft_s.p99'?); valid: "),
    ("bad tolerance", "malformed tolerance '5 percent' for output_throughput_tps"),
    ("wrong-way tolerance", "tolerance '+5%' for output_throughput_tps points the wrong way"),
    ("no --current", "the following arguments are required: --current"),
])
def test_usage_errors_give_one_line_and_exit_2(tmp_path, case, message):
    baseline = tmp_path / "b.json"
    good = write_run(tmp_path / "good", summary())
    assert gate("--baseline", baseline, "--current", good, "--update",
                "--metric", "output_throughput_tps") == 0
    args = {
        "missing path": ["--baseline", baseline, "--current", tmp_path / "nope"],
        "missing baseline": ["--baseline", tmp_path / "none.json", "--current", good],
        "schema mismatch": ["--baseline", baseline, "--current",
                            write_run(tmp_path / "v2", summary(schema_version=2))],
        "unknown metric": ["--baseline", baseline, "--current", good, "--metric", "ttft_p99:+10%"],
        "bad tolerance": ["--baseline", baseline, "--current", good,
                          "--metric", "output_throughput_tps:5 percent"],
        "wrong-way tolerance": ["--baseline", baseline, "--current", good,
                                "--metric", "output_throughput_tps:+5%"],
        "no --current": ["--baseline", baseline],
    }[case]
    result = _run_module(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("llmperf-gate: error: ")
    assert message in line
