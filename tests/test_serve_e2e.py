"""`llmperf engine=openai` against `llmperf-serve` on loopback: the figures agree with the
server's own (its request log, and its /metrics scraped during the run), and a server that
dies mid-run ends the run with a report."""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def start_server(*args: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "llmperf.serve", *args, f"port={port}"], cwd=ROOT, env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200:
                return proc, f"http://127.0.0.1:{port}/v1"
        except httpx.HTTPError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "llmperf-serve did not start"
        time.sleep(0.2)


def llmperf(run_dir: Path, base_url: str, model: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llmperf", "engine=openai", f"engine.base_url={base_url}",
         f"model={model}", "engine.prompt_format=token_ids", f"hydra.run.dir={run_dir}", *args],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=timeout,
    )


def test_client_figures_agree_with_the_servers_log_and_metrics(tmp_path):
    log = tmp_path / "served.jsonl"
    # smollm2-135m: prefills and decode steps of tens of ms, so the loopback hop (about a
    # millisecond each way) is a small part of what both sides measure.
    proc, base_url = start_server("model=smollm2-135m", f"request_log={log}", "engine.max_num_seqs=8")
    try:
        done = llmperf(
            tmp_path / "run", base_url, "smollm2-135m", "scenario=chat", "scenario.num_requests=20",
            "scenario.arrival.rate_rps=1", "scenario.output_tokens.max=32", "report.enabled=false",
        )
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    records = [json.loads(line) for line in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()]
    served = {r["client_request_id"]: r for r in map(json.loads, log.read_text().splitlines())}
    assert summary["valid"] and summary["num_failed"] == 0
    measured = [r for r in records if not r["warmup"]]
    pairs = [(r, served[r["id"]]) for r in measured]
    assert all(r["output_tokens"] == s["num_output_tokens"] for r, s in pairs)
    client_ttft = statistics.mean(r["first_token_s"] - r["arrival_s"] for r, _ in pairs)
    server_ttft = statistics.mean(s["ttft_s"] for _, s in pairs)
    client_tpot = summary["tpot_s"]["mean"]
    server_tpot = statistics.mean(s["tpot_s"] for _, s in pairs if s["tpot_s"] is not None)
    print(f"\nTTFT client {client_ttft * 1e3:.1f} ms, server {server_ttft * 1e3:.1f} ms; "
          f"TPOT client {client_tpot * 1e3:.2f} ms, server {server_tpot * 1e3:.2f} ms")
    assert client_ttft == pytest.approx(server_ttft, rel=0.10)
    assert client_tpot == pytest.approx(server_tpot, rel=0.10)
    # The scraped /metrics (prometheus_client text, vLLM's names) say what the log says,
    # and split the client's TTFT with at most 5 % left to the network and HTTP.
    assert summary["server_family"] == "vllm" and summary["server_view"] == "complete"
    assert summary["server_ttft_s"]["count"] == len(pairs)
    assert summary["server_ttft_s"]["mean"] == pytest.approx(server_ttft, rel=1e-6)
    assert summary["server_output_tokens"] == sum(s["num_output_tokens"] for _, s in pairs)
    server_share_s = summary["server_queue_s"]["mean"] + summary["server_prefill_s"]["mean"]
    print(f"client TTFT mean {client_ttft * 1e3:.1f} ms = queue + prefill {server_share_s * 1e3:.1f} ms"
          f" + overhead {summary['ttft_overhead_s']['mean'] * 1e3:.1f} ms")
    assert server_share_s == pytest.approx(summary["ttft_s"]["mean"], rel=0.05)
    assert summary["server_ttft_s"]["mean"] <= summary["ttft_s"]["mean"]
    assert (tmp_path / "run" / "server_metrics.csv").is_file()


def test_a_server_killed_mid_run_ends_the_run_with_failed_requests_and_a_report(tmp_path):
    proc, base_url = start_server("model=tiny")
    run_dir = tmp_path / "run"
    client = subprocess.Popen(
        [sys.executable, "-m", "llmperf", "engine=openai", f"engine.base_url={base_url}", "model=tiny",
         "engine.request_timeout_s=10", "scenario=chat", "scenario.num_requests=200",
         "scenario.arrival.rate_rps=20", "scenario.saturation.enabled=false",
             f"hydra.run.dir={run_dir}"],
        cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    requests = run_dir / "requests.jsonl"
    deadline = time.monotonic() + 120
    while not (requests.exists() and len(requests.read_text().splitlines()) >= 10):
        assert client.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    proc.kill()
    killed = time.monotonic()
    client.wait(timeout=120)
    ended_after_s = time.monotonic() - killed
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["num_failed"] > 0 and summary["num_completed"] >= 8
    assert summary["num_requests"] == summary["num_completed"] + summary["num_failed"]
    assert not summary["valid"]
    assert (run_dir / "report.html").is_file()
    # Requests in flight end within their timeout; later ones fail at connect, at once.
    assert ended_after_s < 10 + 15
    records = [json.loads(line) for line in requests.read_text().splitlines()]
    assert all(r["error"] for r in records if r["finish_reason"] == "error")
