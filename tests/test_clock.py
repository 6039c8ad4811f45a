"""One clock for workers on other hosts (llmperf/measure/clock.py), without Ray: the offset
from the probe with the shortest round trip, probing on until one is fast enough, the error
bound over a run, and the clocks_agree check naming what made it."""

from __future__ import annotations

import random

import pytest

from llmperf.measure.clock import ClockTrack, OffsetEstimate, estimate_offset
from llmperf.measure.validity import clocks_agree
from llmperf.workload.scenario import ValidityConfig


def test_the_fastest_probe_bounds_a_known_offset_and_drift_shows_later():
    rng = random.Random(7)
    true_offset_ns = 250_000_000
    now = [1_000_000_000_000]

    def coordinator_ns() -> int:
        return now[0]

    def probe() -> int:  # asymmetric one-way delays of 0.2-3 ms each way
        now[0] += rng.randint(200_000, 3_000_000)
        read = now[0] + true_offset_ns
        now[0] += rng.randint(200_000, 3_000_000)
        return read

    first = estimate_offset(probe, probes=16, now_ns=coordinator_ns)
    assert abs(first.offset_s - 0.25) <= first.uncertainty_s
    assert first.uncertainty_s == pytest.approx(first.rtt_s / 2) and first.rtt_s >= 0.0004
    true_offset_ns += 300_000  # the worker's clock gains 0.3 ms over the next ten seconds
    now[0] += 10_000_000_000
    later = estimate_offset(probe, probes=16, now_ns=coordinator_ns)
    track = ClockTrack(0, "node", [first, later], applied_offset_s=first.offset_s)
    assert track.drift_s == pytest.approx(0.0003, abs=first.uncertainty_s + later.uncertainty_s)
    # with the first estimate applied: off by its uncertainty at the start, and by the drift
    # and the later one's uncertainty at the end
    assert track.error_s == pytest.approx(max(first.uncertainty_s,
                                              abs(track.drift_s) + later.uncertainty_s))
    assert track.error_s >= 0.0003 - first.uncertainty_s  # the true drift sits inside it
    off = ClockTrack(0, "node", [first, later], applied_offset_s=0.0)
    assert off.error_s > 0.25  # uncorrected, the whole offset counts


def test_an_estimate_probes_on_until_one_round_trip_is_fast_enough():
    now = [0]
    trips = iter([4_000_000] * 40 + [300_000] + [4_000_000] * 1000)  # one fast round trip

    def coordinator_ns() -> int:
        return now[0]

    def probe() -> int:
        trip = next(trips)
        now[0] += trip // 2
        read = now[0] + 7_000_000  # the worker's clock 7 ms ahead, one-way delays equal
        now[0] += trip - trip // 2
        return read

    fixed = estimate_offset(probe, probes=16, now_ns=coordinator_ns)
    assert fixed.probes == 16 and fixed.uncertainty_s == pytest.approx(0.002)
    found = estimate_offset(probe, probes=16, now_ns=coordinator_ns, target_s=0.0005)
    assert found.probes == 25  # 24 more slow ones, then the fast one: it stops there
    assert found.uncertainty_s == pytest.approx(0.00015) and found.offset_s == pytest.approx(0.007)
    # none fast enough: it stops at max_probes, or once budget_s has passed on its clock
    capped = estimate_offset(probe, probes=16, now_ns=coordinator_ns, target_s=0.0005,
                             max_probes=100)
    assert capped.probes == 100 and capped.uncertainty_s == pytest.approx(0.002)
    timed = estimate_offset(probe, probes=16, now_ns=coordinator_ns, target_s=0.0005,
                            budget_s=0.2)
    assert timed.probes == 50  # 4 ms a round trip: the 50th ends at 0.2 s
    with pytest.raises(ValueError):
        estimate_offset(probe, probes=0)


def test_a_slow_probe_during_the_load_cannot_fail_a_run_a_clear_one_can():
    def estimate(offset_s: float, uncertainty_s: float) -> OffsetEstimate:
        return OffsetEstimate(offset_s, uncertainty_s, 2 * uncertainty_s, 0.0)

    first, last = estimate(0.010, 0.0003), estimate(0.0101, 0.0003)
    slow = estimate(0.012, 0.004)  # the load held the coordinator: it proves nothing
    track = ClockTrack(0, "node", [first, slow, last], applied_offset_s=0.010)
    assert track.error_s == pytest.approx(0.0004)  # the end: drift 0.1 ms + 0.3 ms
    stepped = estimate(0.015, 0.0003)  # the worker's clock stepped 5 ms mid-run, and back
    track = ClockTrack(0, "node", [first, stepped, last], applied_offset_s=0.010)
    assert track.error_s == pytest.approx(0.0047)  # at least 5 ms - 0.3 ms off


def verdict(track: ClockTrack) -> tuple[bool, str]:
    entry = {k: v for k, v in track.to_dict().items() if k != "estimates"}
    check = clocks_agree({"clocks": [entry]}, ValidityConfig(max_clock_uncertainty_s=0.001))
    return check.ok, check.detail


def test_the_check_names_what_put_a_worker_off_the_timeline():
    def estimate(offset_s: float, uncertainty_s: float) -> OffsetEstimate:
        return OffsetEstimate(offset_s, uncertainty_s, 2 * uncertainty_s, 0.0)

    first = estimate(0.250, 0.0003)
    ok, detail = verdict(ClockTrack(2, "n", [first, estimate(0.2501, 0.0003)], 0.250))
    assert ok and "1 workers within 1.0 ms" in detail and "(±0.3 ms after the load)" in detail
    cases = {  # the estimates, the offset applied: the cause named
        "clock_correction=false": ([first, estimate(0.2501, 0.0003)], 0.0),
        "its clock moved during the run": ([first, estimate(0.256, 0.0003),
                                            estimate(0.2501, 0.0003)], 0.250),
        "its clock drifted over the run": ([first, estimate(0.2515, 0.0003)], 0.250),
        "round trips were too slow": ([estimate(0.250, 0.0011), estimate(0.2503, 0.0004)], 0.250),
    }
    for words, (estimates, applied) in cases.items():
        track = ClockTrack(2, "n", estimates, applied)
        ok, detail = verdict(track)
        assert not ok and words in detail and detail.startswith("worker 2's schedule"), detail
        others = [w for w in cases if w != words]
        assert not any(w in detail for w in others), detail
    # slow round trips during the load only: nothing proven, the run stays valid
    track = ClockTrack(2, "n", [first, estimate(0.254, 0.005), estimate(0.2501, 0.0003)], 0.250)
    assert verdict(track)[0] and track.cause == "round trips"
