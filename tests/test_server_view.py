"""A run against llmperf-serve scrapes its /metrics: server_metrics.csv, the server's figures
over the measured window (checked against the server's own request log), the latency split,
and the report's client-vs-server section; a server without /metrics leaves the run as it was."""

from __future__ import annotations

import io
import json
import statistics

import pytest
from rich.console import Console

from llmperf.run.runner import run_benchmark
from llmperf.serve.app import build_app
from llmperf.serve.server import ServerThread, build_server
from llmperf.serverside.scraper import ROUND_TRIP, read_csv
from tests.conftest import compose_overrides

LOAD = [
    "scenario=chat",
    "scenario.num_requests=16",
    "scenario.warmup_requests=2",
    "scenario.arrival.rate_rps=8",
    "scenario.output_tokens.max=24",
    "engine.prompt_format=token_ids",
    "engine.metrics_interval_s=0.2",
    "model=tiny",
    "telemetry.enabled=false",
]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    log_path = tmp_path_factory.mktemp("served") / "served.jsonl"
    server = build_server({"model": "tiny", "num_kv_blocks": 512, "max_model_len": 1024}, request_log=log_path)
    with ServerThread(build_app(server)) as running:
        yield running.base_url, log_path


@pytest.fixture(scope="module")
def scraped_run(served, tmp_path_factory):
    base_url, log_path = served
    run_dir = tmp_path_factory.mktemp("run")
    num_logged_before = len(log_path.read_text().splitlines()) if log_path.exists() else 0
    out = io.StringIO()
    config = compose_overrides("engine=openai", f"engine.base_url={base_url}", *LOAD)
    run_benchmark(config, run_dir, console=Console(file=out, width=200))
    served_rows = [json.loads(line) for line in log_path.read_text().splitlines()[num_logged_before:]]
    return run_dir, json.loads((run_dir / "summary.json").read_text()), served_rows, out.getvalue()


def test_the_servers_window_figures_match_its_request_log(scraped_run):
    run_dir, s, served_rows, _ = scraped_run
    measured = [r for r in served_rows if not (r["client_request_id"] or "").startswith("warmup-")]
    assert s["server_family"] == "vllm" and s["server_view"] == "complete"
    assert len(measured) == s["num_completed"] == 16
    assert s["server_ttft_s"]["count"] == 16
    assert s["server_ttft_s"]["mean"] == pytest.approx(sum(r["ttft_s"] for r in measured) / 16)
    assert s["server_e2e_s"]["mean"] == pytest.approx(sum(r["e2e_s"] for r in measured) / 16)
    assert s["server_output_tokens"] == s["output_tokens_total"] == sum(r["num_output_tokens"] for r in measured)
    assert s["server_prompt_tokens"] == s["input_tokens_total"]
    assert s["server_preemptions"] == 0
    rows = read_csv(run_dir / "server_metrics.csv")
    assert {r.figure for r in rows} >= {"ttft_s", "queue_s", "prefill_s", "decode_s", "running", "waiting"}
    # The window opens with the scrape taken after the warmup, before the measured phase began.
    assert min(r.t_s for r in rows) <= s["server_window_start_s"] <= s["measure_start_s"]


def test_the_split_adds_up_and_the_server_sees_no_more_than_the_client(scraped_run):
    _, s, _, _ = scraped_run
    server_share_s = s["server_queue_s"]["mean"] + s["server_prefill_s"]["mean"]
    assert server_share_s + s["ttft_overhead_s"]["mean"] == pytest.approx(s["ttft_s"]["mean"])
    assert s["server_ttft_s"]["mean"] == pytest.approx(server_share_s)  # queue + prefill is TTFT here
    assert s["server_ttft_s"]["mean"] <= s["ttft_s"]["mean"]
    assert s["server_e2e_s"]["mean"] <= s["e2e_s"]["mean"]
    assert s["ttft_overhead_s"]["mean"] >= 0 and s["e2e_overhead_s"]["mean"] >= 0
    # Random prompts share no block, and llmperf-serve here caches no prefixes.
    assert s["workload_shared_prefix_tokens"] < 16
    checks = {c["check"]: c for c in s["validity"]}
    assert checks["prefix_cache_expected"]["ok"] and not checks["server_agrees"]["blocking"]


def test_the_round_trip_is_timed_in_the_window_and_the_parts_add_up_to_the_client(scraped_run):
    run_dir, s, _, _ = scraped_run
    trips = [r for r in read_csv(run_dir / "server_metrics.csv") if r.figure == ROUND_TRIP]
    assert trips and all(r.metric.endswith("/v1/models") and 0 < r.value < 1 for r in trips)
    inside = [r.value for r in trips if s["measure_start_s"] <= r.t_s <= s["duration_s"] + s["measure_start_s"]]
    assert s["server_round_trip_s"]["count"] == len(inside) >= 3
    assert s["server_round_trip_s"]["mean"] == pytest.approx(sum(inside) / len(inside))
    assert s["server_round_trip_s"]["median"] == pytest.approx(statistics.median(inside))
    # The transport: the client's own part of each request (mean) + the round trip (median).
    assert s["ttft_transport_s"] == pytest.approx(s["client_send_s"]["mean"] + s["server_round_trip_s"]["median"])
    parts = (s["server_queue_s"]["mean"] + s["server_prefill_s"]["mean"] + s["ttft_frontend_s"]
             + s["ttft_transport_s"] + s["ttft_unexplained_s"])
    assert parts == pytest.approx(s["ttft_s"]["mean"], rel=1e-9)
    checks = {c["check"]: c for c in s["validity"]}
    assert "client send" in checks["split_closes"]["detail"] and "HTTP round trip median" in checks["split_closes"]["detail"]
    assert not checks["split_closes"]["blocking"]


def test_each_request_is_stamped_where_it_was_written_and_where_the_headers_came(scraped_run):
    """client_send_s and headers_wait_s from the records' own stamps, in the order a request
    lives: handed to the engine, written, headers back, first token."""
    run_dir, s, _, _ = scraped_run
    rows = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    measured = [r for r in rows if not r["warmup"]]
    assert len(measured) == 16
    for r in measured:
        assert r["dispatch_s"] <= r["written_s"] <= r["headers_s"] <= r["first_token_s"]
    sends = [r["written_s"] - r["arrival_s"] for r in measured]
    waits = [r["headers_s"] - r["written_s"] for r in measured]
    assert s["client_send_s"]["mean"] == pytest.approx(statistics.fmean(sends))
    assert s["headers_wait_s"]["median"] == pytest.approx(statistics.median(waits))
    # The client's own part holds its dispatch lag.
    assert s["client_send_s"]["mean"] >= s["dispatch_lag_s"]["mean"]


def test_the_report_shows_client_vs_server(scraped_run):
    run_dir, _, _, _ = scraped_run
    html = (run_dir / "report.html").read_text()
    assert "<h2>Client vs server</h2>" in html
    assert (run_dir / "plots" / "latency_split.png").stat().st_size > 5_000
    assert (run_dir / "plots" / "server_gauges.png").stat().st_size > 5_000
    assert "queue_s+prefill_s" in html
    assert "ttft_unexplained_pct" in html and "server_round_trip_s.median" in html and "client_send_s.mean" in html


def test_no_metrics_endpoint_is_one_line_and_the_run_goes_on(served, tmp_path):
    base_url, _ = served
    out = io.StringIO()
    config = compose_overrides("engine=openai", f"engine.base_url={base_url}", "engine.metrics_url=http://127.0.0.1:1/metrics",
                     *LOAD[:2], "report.enabled=false")
    run_benchmark(config, tmp_path, console=Console(file=out, width=200))
    lines = [line for line in out.getvalue().splitlines() if "server-side" in line]
    assert lines == [lines[0]] and lines[0].startswith("no server-side view: http://127.0.0.1:1/metrics")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["num_completed"] == 16 and "server_family" not in summary
    assert not (tmp_path / "server_metrics.csv").exists()
