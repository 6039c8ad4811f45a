"""compute_metrics against figures worked out by hand from a handful of records."""

from __future__ import annotations

import math

import pytest

from llmperf.measure.metrics import compute_metrics, distribution
from llmperf.measure.validity import check_validity
from llmperf.workload.scenario import SloConfig, ValidityConfig
from tests.fakes import record


@pytest.fixture
def records():
    return [
        # warmup: a huge TTFT that must not show anywhere
        record("w0", 0.0, [5.0, 6.0], warmup=True, input_tokens=100),
        # TTFT 0.1, E2E 0.25, TPOT (0.25-0.1)/2 = 0.075, gaps 0.05 and 0.10
        record("r0", 0.0, [0.10, 0.15, 0.25], dispatch_s=0.001, input_tokens=10, admitted_s=0.05),
        # one token: TTFT = E2E = 0.2, no TPOT, no gap
        record("r1", 0.5, [0.70], dispatch_s=0.502, input_tokens=20),
        # TTFT 0.3, E2E 1.0, TPOT (1.0-0.3)/4 = 0.175, gaps 0.1 0.1 0.1 0.4
        record("r2", 1.0, [1.3, 1.4, 1.5, 1.6, 2.0], dispatch_s=1.004, input_tokens=5),
        # failed: counts as a request and for dispatch lag, not for latencies or tokens
        record("r3", 1.2, [], dispatch_s=1.21, end_s=1.25, input_tokens=7, error="boom"),
    ]


def test_counts_window_and_throughputs(records):
    m = compute_metrics(records, SloConfig())
    assert (m["num_requests"], m["num_completed"], m["num_failed"]) == (4, 3, 1)
    assert (m["num_warmup"], m["num_warmup_completed"]) == (1, 1)
    assert m["window_start_s"] == 0.0 and m["window_end_s"] == 2.0
    assert m["duration_s"] == pytest.approx(2.0)
    assert m["input_tokens_total"] == 35 and m["output_tokens_total"] == 9
    assert m["request_throughput_rps"] == pytest.approx(1.5)
    assert m["output_throughput_tps"] == pytest.approx(4.5)
    assert m["total_throughput_tps"] == pytest.approx(22.0)


def test_ttft_is_from_intended_arrival_with_linear_percentiles(records):
    ttft = compute_metrics(records, SloConfig())["ttft_s"]
    assert ttft["mean"] == pytest.approx(0.2)
    assert ttft["median"] == pytest.approx(0.2)
    assert ttft["p90"] == pytest.approx(0.28)  # 0.2 + 0.8 x 0.1
    assert ttft["p99"] == pytest.approx(0.298)
    assert ttft["std"] == pytest.approx(math.sqrt(0.02 / 3))  # population std
    assert (ttft["min"], ttft["max"]) == pytest.approx((0.1, 0.3))


def test_tpot_excludes_first_token_and_skips_one_token_outputs(records):
    tpot = compute_metrics(records, SloConfig())["tpot_s"]
    assert tpot["mean"] == pytest.approx((0.075 + 0.175) / 2)
    assert (tpot["min"], tpot["max"]) == pytest.approx((0.075, 0.175))


def test_itl_pools_gaps_over_requests(records):
    itl = compute_metrics(records, SloConfig())["itl_s"]
    assert itl["mean"] == pytest.approx(0.85 / 6)
    assert itl["median"] == pytest.approx(0.1)
    assert (itl["min"], itl["max"]) == pytest.approx((0.05, 0.4))


def test_e2e_queue_and_dispatch_lag(records):
    m = compute_metrics(records, SloConfig())
    assert m["e2e_s"]["mean"] == pytest.approx((0.25 + 0.2 + 1.0) / 3)
    assert m["queue_s"]["mean"] == pytest.approx(0.05)  # only r0's engine told
    assert m["dispatch_lag_s"]["mean"] == pytest.approx((0.001 + 0.002 + 0.004 + 0.01) / 4)
    assert m["dispatch_lag_s"]["max"] == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("slo", "num_met"),
    [
        (SloConfig(), 3),  # no target: every completed request meets it
        (SloConfig(ttft_s=0.25), 2),  # r2's 0.3 misses
        (SloConfig(tpot_s=0.07), 1),  # r0 (0.075) and r2 miss; r1 has no TPOT and cannot
        (SloConfig(e2e_s=0.22), 1),  # only r1 (0.2)
        (SloConfig(ttft_s=0.25, tpot_s=0.1, e2e_s=0.3), 2),
        (SloConfig(ttft_s=0.15, e2e_s=0.22), 0),  # r0 misses e2e, r1 misses ttft
    ],
)
def test_goodput_counts_requests_meeting_every_slo(records, slo, num_met):
    m = compute_metrics(records, slo)
    assert m["num_slo_met"] == num_met
    assert m["goodput_rps"] == pytest.approx(num_met / 2.0)
    assert m["slo_attainment"] == pytest.approx(num_met / 4)  # the failed request counts as a miss


def test_no_records_gives_empty_figures_not_errors():
    m = compute_metrics([], SloConfig(ttft_s=1.0))
    assert m["num_requests"] == 0 and m["duration_s"] == 0.0
    assert m["request_throughput_rps"] is None and m["goodput_rps"] is None
    assert m["ttft_s"] == distribution([])


def test_distribution_of_one_value():
    assert distribution([0.5]) == {
        "mean": 0.5,
        "median": 0.5,
        "p90": 0.5,
        "p95": 0.5,
        "p99": 0.5,
        "std": 0.0,
        "min": 0.5,
        "max": 0.5,
    }


def test_validity_names_each_failed_check(records):
    summary = {**compute_metrics(records, SloConfig()), "interrupted": True}
    checks = {
        c.check: c
        for c in check_validity(
            summary, ValidityConfig(min_duration_s=1.0, min_completed=3, max_error_rate=0.1)
        )
    }
    assert checks["warmup"].ok and checks["min_duration"].ok and checks["min_completed"].ok
    assert not checks["error_rate"].ok and "1 of 4 failed" in checks["error_rate"].detail
    assert not checks["not_interrupted"].ok
    strict = {
        c.check: c.ok
        for c in check_validity(summary, ValidityConfig(min_duration_s=3.0, min_completed=4))
    }
    assert not strict["min_duration"] and not strict["min_completed"]


def test_a_run_without_warmup_passes_the_warmup_check(records):
    summary = {**compute_metrics(records, SloConfig()), "interrupted": False}
    summary.update(num_warmup=0, num_warmup_completed=0)
    (warmup,) = [c for c in check_validity(summary, ValidityConfig()) if c.check == "warmup"]
    assert (warmup.ok, warmup.detail) == (True, "no warmup requested")
    summary.update(num_warmup=2, num_warmup_completed=1)
    (warmup,) = [c for c in check_validity(summary, ValidityConfig()) if c.check == "warmup"]
    assert (warmup.ok, warmup.detail) == (False, "1 of 2 warmup requests completed")
