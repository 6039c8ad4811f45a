"""The steady window (from the in-flight plateau to the last dispatch) and the rate offered
against the rate asked: hand-computed on synthetic records, then on a real synthetic run."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from llmperf.measure.metrics import compute_metrics, distribution, ttft_s
from llmperf.measure.records import RequestRecord
from llmperf.measure.steady import (
    in_flight_curve,
    median_in_flight,
    offered_rate_metrics,
    steady_metrics,
)
from llmperf.measure.summary import Summary
from llmperf.measure.validity import CHECKS, offered_rate_held
from llmperf.run.console import steady_lines
from llmperf.workload.arrivals import ArrivalConfig
from llmperf.workload.scenario import SloConfig, ValidityConfig
from tests.fakes import record

NO_SLO = SloConfig(None, None, None)


def request(i: int, dispatch_s: float, offsets: list[float], arrival_s: float | None = None,
            input_tokens: int = 10) -> RequestRecord:
    """A request dispatched at `dispatch_s` whose tokens arrive `offsets` after it."""
    return record(f"r{i}", dispatch_s if arrival_s is None else arrival_s,
                  [dispatch_s + o for o in offsets], dispatch_s=dispatch_s,
                  input_tokens=input_tokens)


# A closed loop at concurrency 2. Ramp-up: the second user starts at 0.5 s, and these first
# two requests, on a half-empty engine, get their first token after 0.1 s; then each slot
# refills the instant its request ends (1.0, 1.5, 2.0 s), first token after 0.2 s. Tail: the
# last dispatch is at 2.0 s, the last end at 3.0 s. Every request: 5 tokens, 1 s long.
COLD = [0.1, 0.325, 0.55, 0.775, 1.0]
WARM = [0.2, 0.4, 0.6, 0.8, 1.0]
CLOSED = [request(0, 0.0, COLD), request(1, 0.5, COLD), request(2, 1.0, WARM),
          request(3, 1.5, WARM), request(4, 2.0, WARM)]


def test_closed_loop_window_starts_at_the_concurrency_and_ends_at_the_last_dispatch():
    s = steady_metrics(CLOSED, NO_SLO, concurrency=2)
    assert s["steady_window_reason"] is None
    assert (s["steady_window_start_s"], s["steady_window_end_s"]) == (0.5, 2.0)
    assert s["steady_duration_s"] == 1.5 and s["steady_in_flight"] == 2
    # Dispatched after 0.5 s up to 2.0 s: requests 2, 3 and 4, the warm ones.
    assert (s["steady_num_requests"], s["steady_num_completed"]) == (3, 3)
    assert s["steady_ttft_s"]["mean"] == pytest.approx(0.2)
    assert s["steady_ttft_s"]["max"] == pytest.approx(0.2)
    assert s["steady_tpot_s"]["mean"] == pytest.approx(0.2)  # (1.0 - 0.2) / 4
    assert s["steady_itl_s"]["median"] == pytest.approx(0.2)
    assert s["steady_e2e_s"]["p99"] == pytest.approx(1.0)
    assert s["steady_request_throughput_rps"] == pytest.approx(2.0)  # 3 / 1.5 s
    assert s["steady_output_throughput_tps"] == pytest.approx(10.0)  # 15 / 1.5 s
    assert s["steady_total_throughput_tps"] == pytest.approx(30.0)  # (30 + 15) / 1.5 s
    assert s["steady_goodput_rps"] == pytest.approx(2.0)  # no SLO: every completed one
    # The whole run holds the ramp-up and the tail: 5 requests over 0 to 3 s.
    whole = compute_metrics(CLOSED, NO_SLO)
    assert whole["ttft_s"]["mean"] == pytest.approx(0.16)  # (2 x 0.1 + 3 x 0.2) / 5
    assert whole["tpot_s"]["mean"] == pytest.approx(0.21)  # (2 x 0.225 + 3 x 0.2) / 5
    assert whole["request_throughput_rps"] == pytest.approx(5 / 3)


def test_in_flight_counts_an_end_before_a_dispatch_at_one_instant():
    curve = in_flight_curve(CLOSED)
    assert max(count for _, count in curve) == 2  # a slot that refills never reads 3
    assert curve[:2] == [(0.0, 1), (0.5, 2)] and curve[-1] == (3.0, 0)
    # 1 in flight for 0.5 s, 2 for 1.5 s of the dispatch span 0 to 2 s.
    assert median_in_flight(curve, 0.0, 2.0) == 2
    assert median_in_flight(curve, 0.0, 0.8) == 1  # 0.5 s at 1 against 0.3 s at 2


def test_the_open_loop_rule_finds_the_same_plateau_from_the_records_alone():
    s = steady_metrics(CLOSED, NO_SLO, concurrency=None)
    assert (s["steady_in_flight"], s["steady_window_start_s"], s["steady_num_requests"]) == (2, 0.5, 3)


def test_warmup_records_are_left_out_of_the_window():
    warm = record("w", -2.0, [-1.9, -1.5], warmup=True)
    assert steady_metrics([warm, *CLOSED], NO_SLO, 2) == steady_metrics(CLOSED, NO_SLO, 2)


def open_loop(dispatch_gap_s: float, n: int = 10, asked_gap_s: float = 0.1) -> list[RequestRecord]:
    """n requests asked every `asked_gap_s`, dispatched every `dispatch_gap_s`; each gets its
    first token 0.1 s after its dispatch and ends 0.3 s after it (3 tokens)."""
    return [request(i, i * dispatch_gap_s, [0.1, 0.2, 0.3], arrival_s=i * asked_gap_s)
            for i in range(n)]


def test_open_loop_sent_at_80_percent_of_the_rate_asked_warns():
    records = open_loop(0.125)  # 10 req/s asked, sent 8 a second
    rates = offered_rate_metrics(records, ArrivalConfig(process="constant", rate_rps=10.0))
    assert rates["asked_rate_rps"] == 10.0
    assert rates["offered_rate_rps"] == pytest.approx(8.0)  # 9 gaps over 1.125 s
    assert rates["scheduled_rate_rps"] == pytest.approx(10.0)  # 9 gaps over 0.9 s
    assert rates["offered_rate_error_pct"] == pytest.approx(-20.0)
    check = offered_rate_held(rates, ValidityConfig())
    assert (check.check, check.ok, check.blocking) == ("offered_rate_held", False, False)
    assert "offered 8 req/s against 10 asked (-20.0%)" in check.detail
    assert "the client sent late" in check.detail
    # In flight: 1 until 0.125 s, then 2 and 3 in turn (3 for 0.05 s of each 0.125 s): the
    # median over the dispatch span, 0 to 1.125 s, is 2, reached at the second dispatch.
    s = steady_metrics(records, NO_SLO)
    assert (s["steady_in_flight"], s["steady_window_start_s"], s["steady_window_end_s"]) == (2, 0.125, 1.125)
    assert s["steady_num_requests"] == 8  # dispatches 2 to 9
    assert s["steady_request_throughput_rps"] == pytest.approx(8.0)  # 8 over 1.0 s
    # TTFT counts from the intended arrival: 0.1 s + the lag, 0.025 s more each request.
    assert s["steady_ttft_s"]["mean"] == pytest.approx(0.1 + 0.025 * 5.5)  # requests 2 to 9
    assert compute_metrics(records, NO_SLO)["ttft_s"]["mean"] == pytest.approx(0.1 + 0.025 * 4.5)


def test_open_loop_sent_at_the_rate_asked_does_not_warn():
    rates = offered_rate_metrics(open_loop(0.1), ArrivalConfig(process="poisson", rate_rps=10.0))
    assert rates["offered_rate_rps"] == pytest.approx(10.0)
    assert rates["offered_rate_error_pct"] == pytest.approx(0.0, abs=1e-9)
    check = offered_rate_held(rates, ValidityConfig())
    assert check.ok and not check.blocking
    assert offered_rate_held in CHECKS


def test_a_short_random_schedule_is_told_from_a_late_client():
    # Asked 10 req/s, but the schedule itself drew arrivals every 0.125 s; sent on time.
    records = open_loop(0.125, asked_gap_s=0.125)
    rates = offered_rate_metrics(records, ArrivalConfig(process="poisson", rate_rps=10.0))
    assert rates["scheduled_rate_rps"] == pytest.approx(8.0)
    check = offered_rate_held(rates, ValidityConfig())
    assert not check.ok and "a short random schedule" in check.detail


def test_a_closed_loop_asks_no_rate_but_reports_the_one_offered():
    rates = offered_rate_metrics(CLOSED, ArrivalConfig(process="closed", concurrency=2))
    assert rates == {"asked_rate_rps": None, "offered_rate_rps": pytest.approx(2.0),  # 4 / 2 s
                     "scheduled_rate_rps": None, "offered_rate_error_pct": None}
    check = offered_rate_held(rates, ValidityConfig())
    assert check.ok and check.detail.startswith("not measured")
    ramp = ArrivalConfig(process="ramp", rate_rps=10.0, ramp_duration_s=5.0)
    assert offered_rate_metrics(CLOSED, ramp)["asked_rate_rps"] is None
    assert offered_rate_metrics(CLOSED, ArrivalConfig(rate_rps=4.0), sessions=True)["asked_rate_rps"] is None


def assert_no_figures(s: dict) -> None:
    for key in ("steady_ttft_s", "steady_tpot_s", "steady_itl_s", "steady_e2e_s",
                "steady_request_throughput_rps", "steady_output_throughput_tps",
                "steady_total_throughput_tps", "steady_goodput_rps"):
        assert s[key] is None, key


def test_everything_dispatched_at_once_has_no_steady_window():
    offline = [request(i, 0.0, [0.1 * (i + 1)]) for i in range(4)]
    s = steady_metrics(offline, NO_SLO)
    assert "dispatched at one instant" in s["steady_window_reason"]
    assert (s["steady_window_start_s"], s["steady_num_requests"]) == (None, 0)
    assert_no_figures(s)
    assert offered_rate_metrics(offline, ArrivalConfig(process="offline"))["offered_rate_rps"] is None


def test_a_window_with_one_request_says_so_instead_of_inventing_figures():
    # Concurrency 2 reached at 0 s; the only later dispatch is at 1.0 s, the last one.
    records = [request(0, 0.0, [0.5, 1.0]), request(1, 0.0, [0.5, 1.5]), request(2, 1.0, [0.2, 1.0])]
    s = steady_metrics(records, NO_SLO, concurrency=2)
    assert (s["steady_window_start_s"], s["steady_window_end_s"], s["steady_num_requests"]) == (0.0, 1.0, 1)
    assert s["steady_window_reason"] == ("1 request dispatched inside the steady window; its"
                                         " figures need at least 2")
    assert_no_figures(s)
    failed = [*CLOSED[:3], *(record(f"x{i}", 0.5 * i, [], end_s=0.5 * i + 0.2, error="abort")
                             for i in (3, 4))]
    s = steady_metrics(failed, NO_SLO, concurrency=2)
    assert (s["steady_num_requests"], s["steady_num_completed"]) == (3, 1)
    assert s["steady_window_reason"] == ("1 of the 3 requests dispatched inside the steady"
                                         " window completed; its figures need at least 2")
    assert_no_figures(s)
    never = steady_metrics(records, NO_SLO, concurrency=4)
    assert "never reached its plateau of 4" in never["steady_window_reason"]
    assert steady_metrics([], NO_SLO)["steady_window_reason"] == "no measured request"


def test_the_summary_file_reads_the_steady_figures_and_the_console_prints_them():
    figures = {**steady_metrics(CLOSED, NO_SLO, 2),
               **offered_rate_metrics(CLOSED, ArrivalConfig(process="closed", concurrency=2))}
    assert Summary.from_dict({"schema_version": 1, **figures}).figures == figures
    lines = steady_lines(figures)
    assert lines[0].startswith("steady      0.50-2.00 s, 3 requests at 2 in flight:")
    assert "TTFT p50 200.0 p99 200.0 ms" in lines[0] and "2.00 req/s" in lines[0]
    assert lines[1] == "rate        offered 2.00 req/s, no single rate asked"
    empty = steady_metrics([request(0, 0.0, [0.1])], NO_SLO)
    assert steady_lines(empty)[0].startswith("steady      no steady-window figures: all 1")


# -- a real run ------------------------------------------------------------------------

def synthetic_run(tmp_path, extra):
    from llmperf.run.runner import run_benchmark
    from tests.test_run_figures import compose_config

    overrides = ["engine=synthetic", "engine.ttft_s=0.002", "engine.prefill_s_per_token=0",
                 "engine.tpot_s=0.0005", "scenario.prompt_tokens.dist=fixed",
                 "scenario.prompt_tokens.value=16", "scenario.output_tokens.dist=fixed",
                 "scenario.output_tokens.value=8", "scenario.warmup_requests=2",
                 "hardware=cpu", "telemetry.enabled=false", *extra]
    out = io.StringIO()
    run_benchmark(compose_config(overrides), tmp_path, argv=overrides, console=Console(file=out, width=200))
    summary = json.loads((tmp_path / "summary.json").read_text())
    records = [RequestRecord.from_dict(json.loads(line))
               for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    return summary, [r for r in records if not r.warmup], out.getvalue()


def test_an_open_loop_run_writes_its_steady_window_and_rate_to_summary_and_report(tmp_path):
    summary, records, console = synthetic_run(tmp_path, [
        "scenario.num_requests=30", "scenario.arrival.process=constant",
        "scenario.arrival.rate_rps=40"])
    dispatches = sorted(r.dispatch_s for r in records)
    assert summary["asked_rate_rps"] == 40.0
    assert summary["scheduled_rate_rps"] == pytest.approx(40.0)  # 29 gaps of 25 ms, intended
    assert summary["offered_rate_rps"] == pytest.approx(29 / (dispatches[-1] - dispatches[0]))
    assert summary["offered_rate_rps"] == pytest.approx(40.0, rel=0.1)
    assert summary["offered_rate_error_pct"] == pytest.approx(
        100 * (summary["offered_rate_rps"] / 40.0 - 1))
    assert "offered_rate_held" in [c["check"] for c in summary["validity"]]
    # Each request lasts ~6 ms of every 25: a request in flight less than half the time, so
    # the plateau is 1, reached at the first dispatch; the window holds every later one.
    assert summary["steady_window_reason"] is None and summary["steady_in_flight"] == 1
    assert summary["steady_window_start_s"] == dispatches[0]
    assert summary["steady_window_end_s"] == dispatches[-1]
    assert summary["steady_num_requests"] == summary["steady_num_completed"] == 29
    inside = [r for r in records if r.dispatch_s > dispatches[0]]
    assert summary["steady_ttft_s"] == pytest.approx(distribution([ttft_s(r) for r in inside]))
    assert summary["steady_request_throughput_rps"] == pytest.approx(
        29 / (dispatches[-1] - dispatches[0]))
    assert summary["steady_output_throughput_tps"] == pytest.approx(8 * summary["steady_request_throughput_rps"])
    assert "steady      " in console and "rate        offered" in console and "asked 40.00 req/s" in console
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "<h2>Steady window vs whole run</h2>" in html
    assert '<table class="steady">' in html and "steady window</th>" in html
    assert "<b>TTFT p99</b>" in html and "<b>request throughput</b>" in html
    assert "Offered " in html and "against 40.0 req/s asked (" in html


def test_a_closed_loop_run_plateaus_at_its_concurrency(tmp_path):
    summary, records, _ = synthetic_run(tmp_path, [
        "scenario.num_requests=24", "scenario.arrival.process=closed",
        "scenario.arrival.concurrency=4", "report.enabled=false"])
    dispatches = sorted(r.dispatch_s for r in records)
    assert summary["steady_in_flight"] == 4
    assert summary["steady_window_start_s"] == dispatches[3]  # the fourth user's first request
    assert summary["steady_window_end_s"] == dispatches[-1]
    assert summary["steady_num_requests"] == sum(dispatches[3] < d for d in dispatches)
    assert summary["asked_rate_rps"] is None and summary["offered_rate_error_pct"] is None
    assert summary["offered_rate_rps"] == pytest.approx(23 / (dispatches[-1] - dispatches[0]))
