"""Percentiles and goodput against brute force, over random inputs (hypothesis).

The references here are written from the definitions (README, "Metric definitions"),
not from the code: a percentile is linear interpolation between the two closest ranks
of the sorted values (numpy's default, Hyndman and Fan's type 7), the standard
deviation is the population one, and goodput counts the measured requests that
completed and met every SLO target that is set, over the measured window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from llmperf.measure.metrics import compute_metrics, distribution
from llmperf.run.config import SloConfig
from tests.fakes import record

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


def percentile_by_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    below = math.floor(rank)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (rank - below) * (ordered[above] - ordered[below])


@settings(max_examples=200, deadline=None)
@given(st.lists(finite, min_size=1, max_size=60))
def test_distribution_matches_the_definitions(values):
    stats = distribution(values)
    n = len(values)
    mean = math.fsum(values) / n
    scale = max(1.0, max(abs(v) for v in values))
    tolerance = 1e-9 * scale
    assert stats["mean"] == pytest.approx(mean, abs=tolerance)
    assert stats["std"] == pytest.approx(
        math.sqrt(math.fsum((v - mean) ** 2 for v in values) / n), abs=1e-6 * scale
    )
    assert stats["min"] == min(values) and stats["max"] == max(values)
    for key, q in (("median", 50), ("p90", 90), ("p95", 95), ("p99", 99)):
        assert stats[key] == pytest.approx(percentile_by_rank(values, q), abs=tolerance), key
    ordered = [stats[k] for k in ("min", "median", "p90", "p95", "p99", "max")]
    assert all(a <= b + tolerance for a, b in zip(ordered, ordered[1:], strict=False))


@settings(max_examples=50, deadline=None)
@given(st.lists(finite, min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_distribution_does_not_depend_on_the_order_of_its_values(values, rng):
    shuffled = list(values)
    rng.shuffle(shuffled)
    assert distribution(shuffled) == pytest.approx(distribution(values), rel=1e-9, abs=1e-9)


def test_distribution_of_nothing_is_all_none():
    assert set(distribution([]).values()) == {None}


@dataclass(frozen=True)
class Req:
    arrival_s: float
    ttft_s: float  # first token - arrival
    gaps_s: tuple[float, ...]  # between consecutive tokens
    failed: bool
    warmup: bool


requests = st.builds(
    Req,
    arrival_s=st.floats(0, 100),
    ttft_s=st.floats(0, 5),
    gaps_s=st.lists(st.floats(0, 1), max_size=6).map(tuple),
    failed=st.booleans(),
    warmup=st.integers(0, 4).map(lambda k: k == 0),  # about one in five
)


def target_near(data, figures: list[float]) -> float | None:
    """No target, or one close to a figure of the run (times 0.5 to 1.5), so that some
    requests meet it and some miss it by a little."""
    if not figures or data.draw(st.booleans()):
        return None
    return max(0.001, data.draw(st.sampled_from(figures)) * data.draw(st.floats(0.5, 1.5)))


def as_record(i: int, r: Req):
    first = r.arrival_s + r.ttft_s
    times = [first]
    for gap in r.gaps_s:
        times.append(times[-1] + gap)
    return record(f"{i}", r.arrival_s, times, error="boom" if r.failed else None, warmup=r.warmup)


def good_by_definition(r: Req, slo: SloConfig) -> bool:
    if r.failed or r.warmup:
        return False
    e2e = r.ttft_s + math.fsum(r.gaps_s)
    tpot = (e2e - r.ttft_s) / len(r.gaps_s) if r.gaps_s else None  # output tokens - 1 = gaps
    return (
        (slo.ttft_s is None or r.ttft_s <= slo.ttft_s + 1e-9)
        and (slo.tpot_s is None or tpot is None or tpot <= slo.tpot_s + 1e-9)
        and (slo.e2e_s is None or e2e <= slo.e2e_s + 1e-9)
    )


def far_from_targets(r: Req, slo: SloConfig) -> bool:
    """Keep examples whose figures are not within rounding of a target: which side of
    it they fall on would depend on summation order, not on the definitions."""
    e2e = r.ttft_s + math.fsum(r.gaps_s)
    figures = [(r.ttft_s, slo.ttft_s), (e2e, slo.e2e_s)]
    if r.gaps_s:
        figures.append(((e2e - r.ttft_s) / len(r.gaps_s), slo.tpot_s))
    return all(t is None or abs(v - t) > 1e-6 for v, t in figures)


@settings(max_examples=150, deadline=None)
@given(st.lists(requests, min_size=1, max_size=25), st.data())
def test_goodput_counts_the_measured_requests_that_meet_every_target(reqs, data):
    slo = SloConfig(
        ttft_s=target_near(data, [r.ttft_s for r in reqs]),
        tpot_s=target_near(data, [sum(r.gaps_s) / len(r.gaps_s) for r in reqs if r.gaps_s]),
        e2e_s=target_near(data, [r.ttft_s + sum(r.gaps_s) for r in reqs]),
    )
    assume(all(far_from_targets(r, slo) for r in reqs))
    records = [as_record(i, r) for i, r in enumerate(reqs)]
    metrics = compute_metrics(records, slo)

    measured = [(r, rec) for r, rec in zip(reqs, records, strict=True) if not r.warmup]
    num_good = sum(good_by_definition(r, slo) for r, _ in measured)
    assert metrics["num_slo_met"] == num_good
    assert metrics["num_completed"] == sum(not r.failed for r, _ in measured)
    if not measured:
        assert metrics["goodput_rps"] is None and metrics["slo_attainment"] is None
        return
    window_s = max(rec.end_s for _, rec in measured) - min(r.arrival_s for r, _ in measured)
    assert metrics["duration_s"] == pytest.approx(window_s)
    assert metrics["slo_attainment"] == pytest.approx(num_good / len(measured))
    if window_s > 0:
        assert metrics["goodput_rps"] == pytest.approx(num_good / window_s)
        assert metrics["goodput_rps"] <= metrics["request_throughput_rps"] + 1e-12
    else:
        assert metrics["goodput_rps"] is None
    if slo == SloConfig():  # no target: every completed request is good
        assert metrics["num_slo_met"] == metrics["num_completed"]
