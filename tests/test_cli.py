"""The `llmperf` command, run as a user runs it: a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FAST = ["engine=synthetic", "engine.ttft_s=0.001", "engine.tpot_s=0.0005"]


def llmperf(*args: str, cwd: Path, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.Popen(
        [sys.executable, "-m", "llmperf", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


CORRUPT_TRACE = (
    '{"timestamp": 0, "input_length": 8, "output_length": 2}\n{"timestamp": 5, "input_length": 8\n'
)
BAD_INPUTS = {
    # name: (arguments, words the one line must hold)
    "malformed override": (["scenario.num_requests==3"], ["scenario.num_requests==3", "key=value"]),
    "unknown scenario": (
        ["scenario=nope"],
        ["scenario='nope'", "valid:", "chat", "offline", "trace"],
    ),
    "bad arrival process": (
        ["scenario.arrival.process=foo"],
        ["scenario.arrival.process='foo'", "valid:", "poisson", "gamma"],
    ),
    "non-positive rate": (
        ["scenario.arrival.rate_rps=0"],
        ["scenario.arrival.rate_rps=0.0", "> 0"],
    ),
    "not a number": (["scenario.num_requests=abc"], ["scenario.num_requests='abc'", "integer"]),
    "unknown field": (["engine=synthetic", "engine.speed=3"], ["engine.speed", "valid:", "tpot_s"]),
    "missing dataset": (
        ["scenario=sharegpt", "scenario.dataset=nowhere/sample.jsonl"],
        ["scenario.dataset='nowhere/sample.jsonl'", "not found"],
    ),
    "corrupt trace line": (
        ["scenario=trace", "scenario.arrival.trace_path=corrupt.jsonl"],
        ["scenario.arrival.trace_path", "corrupt.jsonl line 2", "JSON"],
    ),
    "negative telemetry device index": (
        ["engine=synthetic", "telemetry.device_indices=[-1]"],
        ["telemetry.device_indices=[-1]", "must be >= 0"],
    ),
    "negative injected slowdown": (
        ["engine.inject_slowdown=-0.1"],
        ["inject_slowdown", "-0.1", "must be >= 0"],
    ),
    "missing checkpoint folder": (
        ["model.path=no/such/checkpoint"],
        ["model.path='no/such/checkpoint'", "no such checkpoint folder"],
    ),
    "bad job in a sweep": (
        ["-m", "scenario.arrival.rate_rps=2,-1"],
        ["scenario.arrival.rate_rps=-1.0", "> 0"],
    ),
    "interval sweep": (
        ["-m", "scenario.arrival.rate_rps=interval(1,2)"],
        ["scenario.arrival.rate_rps=interval(1,2)", "range("],
    ),
    "zero load workers": (["scenario.client.workers=0"], ["scenario.client.workers=0", "> 0"]),
    "negative load workers": (["scenario.client.workers=-2"], ["scenario.client.workers=-2", "> 0"]),
    "load workers on an in-process engine": (
        ["engine=reference", "scenario.client.workers=2"],
        ["scenario.client.workers=2", "reachable from several processes (engine=openai)",
         "reference runs in this process"],
    ),
    "load workers on a synthetic engine with a queue": (
        ["engine=synthetic", "engine.max_concurrency=4", "scenario.client.workers=2"],
        ["scenario.client.workers=2", "engine=synthetic without max_concurrency"],
    ),
    "load workers for sessions": (
        ["engine=openai", "scenario=multiturn", "scenario.client.workers=2"],
        ["scenario.client.workers=2", "multi-turn sessions run in one process"],
    ),
    "unknown flag": (["--no-such-flag"], ["unrecognized arguments: --no-such-flag"]),
    "bad --cfg choice": (["--cfg", "nope"], ["--cfg", "'nope'", "job"]),
}


@pytest.fixture(scope="module")
def bad_input_results(tmp_path_factory):
    """Every bad input at once: the processes run side by side."""
    cwd = tmp_path_factory.mktemp("bad")
    (cwd / "corrupt.jsonl").write_text(CORRUPT_TRACE)
    procs = {name: llmperf(*args, cwd=cwd) for name, (args, _) in BAD_INPUTS.items()}
    results = {name: (proc.wait(timeout=120), *proc.communicate()) for name, proc in procs.items()}
    return cwd, results


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["engine.attention=foo"], ["attention backend 'foo'", "valid:", "sdpa", "triton"]),
        (["engine.precision=int3"], ["precision 'int3'", "valid:", "int8", "fp8"]),
        (["engine.tp=3"], ["tp=3", "num_attention_heads"]),
    ],
)
def test_an_engine_option_the_engine_refuses_gives_one_line_and_exit_2(tmp_path, args, words):
    proc = llmperf(*args, "scenario.num_requests=2", cwd=tmp_path)
    returncode = proc.wait(timeout=120)
    _, stderr = proc.communicate()
    lines = stderr.strip().splitlines()
    assert returncode == 2 and len(lines) == 1, stderr
    assert all(w in lines[0] for w in words)


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_bad_input_gives_one_line_and_exit_2(bad_input_results, name):
    cwd, results = bad_input_results
    returncode, stdout, stderr = results[name]
    assert returncode == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("llmperf: error: ")
    for word in BAD_INPUTS[name][1]:
        assert word in lines[0]
    assert not (cwd / "reports").exists()  # refused before any run folder was made


def test_run_writes_its_folder_under_reports_runs(tmp_path):
    proc = llmperf(
        *FAST,
        "scenario=offline",
        "scenario.num_requests=6",
        "scenario.warmup_requests=1",
        cwd=tmp_path,
    )
    returncode = proc.wait(timeout=120)
    stdout, stderr = proc.communicate()
    assert returncode == 0, stderr
    (run_dir,) = (tmp_path / "reports" / "runs").iterdir()
    assert {"summary.json", "requests.jsonl", "config.yaml", "environment.json"} <= {
        p.name for p in run_dir.iterdir()
    }
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["num_completed"] == 6 and summary["engine"]["name"] == "synthetic"
    environment = json.loads((run_dir / "environment.json").read_text())
    assert environment["command_line"][-3:] == [
        "scenario=offline",
        "scenario.num_requests=6",
        "scenario.warmup_requests=1",
    ]
    assert environment["packages"]["torch"] and environment["python"] == sys.version.split()[0]
    assert environment["torch"]["version"] == environment["packages"]["torch"]
    # hardware=auto, as resolved: the profile the figures used
    assert environment["hardware"] == summary["hardware"] and summary["hardware"]["name"] != "auto"
    assert "ttft" in stdout and "throughput" in stdout


def test_multirun_sweeps_into_one_folder_per_job(tmp_path):
    proc = llmperf(
        "-m",
        *FAST,
        "scenario=offline",
        "scenario.warmup_requests=0",
        "scenario.num_requests=2,3",
        cwd=tmp_path,
    )
    returncode = proc.wait(timeout=120)
    assert returncode == 0, proc.communicate()[1]
    summaries = [
        json.loads(p.read_text())
        for p in (tmp_path / "reports" / "sweeps").glob("*/*/summary.json")
    ]
    assert sorted(s["num_requests"] for s in summaries) == [2, 3]


def test_sigint_ends_cleanly_and_keeps_what_was_measured(tmp_path):
    run_dir = tmp_path / "run"
    proc = llmperf(
        *FAST,
        "engine.tpot_s=0.005",
        "scenario=closed",
        "scenario.num_requests=10000",
        "scenario.warmup_requests=0",
        "scenario.output_tokens.dist=fixed",
        "scenario.output_tokens.value=10",
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    records = run_dir / "requests.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        not records.exists() or len(records.read_text().splitlines()) < 20
    ):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    returncode = proc.wait(timeout=60)
    stdout, stderr = proc.communicate()
    assert returncode == 130, stderr
    assert "Traceback" not in stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["valid"] is False
    assert {c["check"]: c["ok"] for c in summary["validity"]}["not_interrupted"] is False
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    assert 20 <= len(lines) < 10000
    assert summary["num_requests"] == len(lines)
    aborted = [r for r in lines if r["error"] == "interrupted"]
    assert 1 <= len(aborted) <= 8  # the closed loop's requests in flight
    assert summary["num_completed"] == len(lines) - len(aborted)
