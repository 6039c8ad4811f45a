"""scenario.arrival.max_concurrency: an open loop held to C requests in flight, the wait that
costs reported as client queue time, and TTFT still counted from the intended arrival."""

from __future__ import annotations

import heapq
import io
import json

import numpy as np
import pytest
from rich.console import Console

from llmperf.errors import ConfigError
from llmperf.measure.client_cpu import client_delay_s
from llmperf.measure.records import RequestRecord
from llmperf.measure.steady import in_flight_curve
from llmperf.workload.arrivals import ArrivalConfig
from llmperf.workload.scenario import ScenarioConfig
from llmperf.workload.sessions import SessionConfig

SERVICE_S = 0.024  # the synthetic engine's time to its one token: utilisation 50 x 0.024 / 2 = 0.6


def capped_run(tmp_path, num_requests: int):
    from llmperf.run.runner import run_benchmark
    from tests.conftest import compose_overrides

    overrides = ["engine=synthetic", f"engine.ttft_s={SERVICE_S}", "engine.prefill_s_per_token=0",
                 "engine.tpot_s=0", "scenario.prompt_tokens.dist=fixed",
                 "scenario.prompt_tokens.value=4", "scenario.output_tokens.dist=fixed",
                 "scenario.output_tokens.value=1", "scenario.warmup_requests=0",
                 "scenario.arrival.process=poisson", "scenario.arrival.rate_rps=50",
                 "scenario.arrival.max_concurrency=2", f"scenario.num_requests={num_requests}",
                 "scenario.seed=3", "hardware=cpu", "telemetry.enabled=false",
                 "report.enabled=false"]
    out = io.StringIO()
    run_benchmark(compose_overrides(*overrides), tmp_path, argv=overrides,
                  console=Console(file=out, width=200))
    summary = json.loads((tmp_path / "summary.json").read_text())
    records = [RequestRecord.from_dict(json.loads(line))
               for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    return summary, records, out.getvalue()


def fcfs_waits(arrivals_s: list[float], services_s: list[float], servers: int) -> list[float]:
    """A first-come-first-served queue with `servers` servers: each arrival's wait, simulated
    event by event, the i-th arrival holding a server for services_s[i] (the M/D/c queue
    when the services are one fixed time)."""
    free_at = [0.0] * servers
    waits = []
    for a, service_s in zip(arrivals_s, services_s, strict=True):
        start = max(a, heapq.heappop(free_at))
        waits.append(start - a)
        heapq.heappush(free_at, start + service_s)
    return waits


@pytest.fixture(scope="module")
def capped(tmp_path_factory):
    return capped_run(tmp_path_factory.mktemp("capped"), 500)


def test_poisson_50_capped_at_2_never_has_more_than_2_in_flight(capped):
    summary, records, console = capped
    assert len(records) == 500 and all(r.ok for r in records)
    # No instant has more than 2 requests in flight (dispatched, not yet ended).
    assert max(n for _, n in in_flight_curve(records)) == 2
    assert summary["client_queue_s"]["mean"] == pytest.approx(
        np.mean([r.client_queue_s for r in records]))
    assert "client queue  at most 2 in flight" in console


def test_the_cap_queues_first_come_first_served_on_the_slots_it_releases(capped):
    """Whatever the machine's load: the 2-server FCFS queue replayed on the same arrivals,
    each slot free again at its holder's last token, waits as the run measured (a request the
    client reached late waits for the cap only until its slot was freed)."""
    _, records, _ = capped
    ordered = sorted(records, key=lambda r: r.arrival_s)
    free_at = [0.0, 0.0]  # each slot is free again at its holder's last token
    expected = []
    for r in ordered:
        start_s = max(r.arrival_s, heapq.heappop(free_at))
        expected.append(start_s - r.arrival_s)
        heapq.heappush(free_at, r.end_s)
    expected_s = float(np.mean(expected))
    measured_s = float(np.mean([r.client_queue_s for r in records]))
    assert expected_s > 0.004  # a real queue: the check below is not of two near-zeros
    assert measured_s == pytest.approx(expected_s, rel=0.05)
    # TTFT counts from the intended arrival: the client queue is inside it.
    for r in records:
        assert r.first_token_s - r.arrival_s >= r.client_queue_s + 0.9 * SERVICE_S


def test_the_client_queue_is_the_m_d_2_wait_of_the_engines_service_time(capped):
    """The analytic figure: the M/D/2 queue of the engine's fixed service time, simulated on
    the same arrivals. It holds when the client sends on time and the engine's sleeps wake on
    time; a machine too loaded for either (other processes on its 2 cores) is said, not
    measured."""
    summary, records, _ = capped
    kept_up = next(c for c in summary["validity"] if c["check"] == "client_kept_up")
    services_s = [r.end_s - r.dispatch_s for r in records]
    spread = float(np.std(services_s) / np.mean(services_s))
    if not kept_up["ok"] or spread > 0.05:
        pytest.skip(f"this machine was too loaded to time a 24 ms service: client_kept_up"
                    f" {kept_up['ok']}, service CV {spread:.2f}")
    assert float(np.mean(services_s)) == pytest.approx(SERVICE_S, rel=0.05)
    # The service time the cap's two servers see: a slot held from when the request took it
    # (its release to it, else its dispatch) to its last token, the engine's 24 ms plus the
    # loop's wake-ups.
    ordered = sorted(records, key=lambda r: r.arrival_s)
    holds_s = [r.end_s - (r.arrival_s + r.client_queue_s) if r.client_queue_s
               else r.end_s - r.dispatch_s for r in ordered]
    service_s = float(np.mean(holds_s))
    arrivals_s = [r.arrival_s for r in ordered]
    expected_s = float(np.mean(fcfs_waits(arrivals_s, [service_s] * 500, 2)))
    # The same queue with each request's own hold: what the cap did, wake-up jitter included
    each_s = float(np.mean(fcfs_waits(arrivals_s, holds_s, 2)))
    measured_s = float(np.mean([r.client_queue_s for r in records]))
    hold_cv = float(np.std(holds_s) / service_s)
    print(f"M/D/2 at {service_s * 1e3:.2f} ms: {expected_s * 1e3:.3f} ms; with each request's "
          f"hold (CV {hold_cv:.3f}): {each_s * 1e3:.3f} ms; client queue mean {measured_s * 1e3:.3f} ms")
    assert measured_s == pytest.approx(each_s, rel=0.05)
    if hold_cv < 0.02:  # holds this even, the fixed-service queue's figure is theirs
        assert measured_s == pytest.approx(expected_s, rel=0.05)
    assert summary["ttft_s"]["mean"] == pytest.approx(measured_s + service_s, rel=0.05)


def test_the_caps_wait_is_not_the_clients_delay(capped):
    summary, records, _ = capped
    queued = [r for r in records if r.client_queue_s > 0]
    assert len(queued) > 50
    # Sent after its intended arrival on purpose, by the queue's wait...
    lateness_s = [r.dispatch_s - r.arrival_s for r in queued]
    delays_s = [client_delay_s(r) for r in queued]
    # ...which its client delay leaves out: it counts from the slot's release.
    for r, late_s, delay_s in zip(queued, lateness_s, delays_s, strict=True):
        assert delay_s == pytest.approx(max(late_s - r.client_queue_s, 0.0), abs=1e-9)
    assert np.mean(lateness_s) > np.mean(delays_s) + 0.004
    assert summary["client_delay_s"]["mean"] == pytest.approx(
        np.mean([client_delay_s(r) for r in records]))
    assert summary["dispatch_lag_s"]["mean"] == pytest.approx(
        np.mean([r.dispatch_s - r.arrival_s - r.client_queue_s for r in records]))


def test_without_a_cap_client_queue_is_null_and_records_hold_zero(tmp_path):
    from llmperf.measure.metrics import compute_metrics

    records = [RequestRecord(str(i), i * 0.1, i * 0.1, i * 0.1 + 0.01, i * 0.1 + 0.02,
                             token_times_s=[i * 0.1 + 0.01], output_tokens=1) for i in range(5)]
    assert all(r.client_queue_s == 0.0 and r.stage == 0 for r in records)
    figures = compute_metrics(records, ScenarioConfig().slo)
    assert figures["client_queue_s"]["mean"] is None
    assert compute_metrics(records, ScenarioConfig().slo, capped=True)["client_queue_s"]["max"] == 0.0


def test_the_closed_loop_and_sessions_refuse_a_cap():
    with pytest.raises(ConfigError, match="closed loop holds its concurrency"):
        ArrivalConfig(process="closed", concurrency=4, max_concurrency=2)
    with pytest.raises(ConfigError, match="must be > 0"):
        ArrivalConfig(max_concurrency=0)
    with pytest.raises(ConfigError, match="sessions.max_concurrent"):
        ScenarioConfig(arrival=ArrivalConfig(max_concurrency=2), sessions=SessionConfig(turns=2))


def test_a_client_queue_that_grows_without_bound_reads_as_saturation(tmp_path):
    from engines.synthetic_options import SyntheticEngineConfig
    from llmperf.measure.saturation import SaturationConfig
    from llmperf.run.config import Config, LengthConfig, ReportConfig, TelemetryConfig
    from llmperf.run.runner import run_benchmark

    # 2 slots of 20 ms serve 100 req/s; 200 asked: the client's queue grows by 100 a second.
    scenario = ScenarioConfig(
        arrival=ArrivalConfig(process="constant", rate_rps=200, max_concurrency=2),
        num_requests=None, duration_s=8.0, warmup_requests=0,
        output_tokens=LengthConfig(value=1), saturation=SaturationConfig(window_s=1.0))
    config = Config(scenario=scenario, engine=SyntheticEngineConfig(ttft_s=0.02),
                    hardware={"name": "cpu"}, telemetry=TelemetryConfig(enabled=False),
                    report=ReportConfig(enabled=False))
    summary = run_benchmark(config, tmp_path, console=Console(file=io.StringIO())).summary
    assert summary["saturated"] is True
    assert summary["saturated_at_rps"] == pytest.approx(200, rel=0.05)
    assert summary["window_end_s"] - summary["window_start_s"] < 4.0  # of the 8 s asked
    assert summary["client_queue_s"]["max"] > 0.3  # the queue it stopped
