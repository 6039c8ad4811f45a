import numpy as np
import pytest

from llmperf.gate.compare import IMPROVED, PASS, REGRESSION, WITHIN_NOISE, judge
from llmperf.gate.errors import GateError
from llmperf.gate.metric_spec import MetricSpec, Tolerance

THROUGHPUT = MetricSpec.parse("output_throughput_tps")
TTFT_P99 = MetricSpec.parse("ttft_s.p99")
PADDED = MetricSpec.parse("steps.padded_fraction")
FIVE_PCT = Tolerance(0.05, relative=True)


@pytest.mark.parametrize("spec, baseline, current, verdict", [
    (THROUGHPUT, [100.0], [70.0], REGRESSION),
    (THROUGHPUT, [100.0], [97.0], PASS),
    (THROUGHPUT, [100.0], [94.0], REGRESSION),  # one repeat a side: the tolerance alone decides
    (THROUGHPUT, [100.0], [95.0], PASS),        # exactly the tolerance passes
    (THROUGHPUT, [100.0], [130.0], IMPROVED),
    (TTFT_P99, [0.50], [0.65], REGRESSION),     # latency up is bad
    (TTFT_P99, [0.50], [0.35], IMPROVED),       # latency down is good
    (TTFT_P99, [0.50], [0.52], PASS),
])
def test_verdict_is_aware_of_direction(spec, baseline, current, verdict):
    assert judge(spec, FIVE_PCT, baseline, current).verdict == verdict


def test_change_past_tolerance_that_noise_explains_passes_within_noise():
    # medians 100 -> 92 (-8%, past -5%) but the repeats spread +-10%
    result = judge(THROUGHPUT, FIVE_PCT, [90, 95, 100, 105, 110], [84, 92, 101])
    assert result.change.point == pytest.approx(-0.08)
    assert result.change.high > -0.05
    assert result.verdict == WITHIN_NOISE


def test_same_change_with_quiet_repeats_is_a_regression():
    result = judge(THROUGHPUT, FIVE_PCT, [99, 99.5, 100, 100.5, 101], [91.5, 92, 92.5])
    assert result.change.point == pytest.approx(-0.08)
    assert result.change.high < -0.05
    assert result.verdict == REGRESSION


def test_absolute_tolerance_for_a_fraction_that_starts_at_zero():
    tol = Tolerance(0.02, relative=False)
    assert judge(PADDED, tol, [0.0], [0.01]).verdict == PASS
    result = judge(PADDED, tol, [0.0], [0.25])
    assert result.verdict == REGRESSION
    assert result.change.point == pytest.approx(0.25)


def test_relative_tolerance_on_a_zero_baseline_asks_for_an_absolute_one():
    with pytest.raises(GateError, match=r"holds 0.*steps.padded_fraction:\+0.02"):
        judge(PADDED, FIVE_PCT, [0.0], [0.1])


def _gate_rates(cv: float, tolerance: float, true_change: float, num_baseline: int,
                num_current: int, trials: int = 400, seed: int = 11) -> tuple[float, float]:
    """Share of trials the gate calls a regression, and the share a tolerance-only rule would."""
    rng = np.random.default_rng(seed)
    tol = Tolerance(tolerance, relative=True)
    called = naive = 0
    for _ in range(trials):
        b = 100 * rng.lognormal(0, cv, num_baseline)
        c = 100 * (1 + true_change) * rng.lognormal(0, cv, num_current)
        result = judge(THROUGHPUT, tol, b, c)
        called += result.is_regression
        naive += result.change.point < -tolerance
    return called / trials, naive / trials


def test_gate_stays_quiet_on_noise_a_tolerance_alone_flags():
    # raw throughput on a shared 2-core machine: ~10% run-to-run spread
    called, naive = _gate_rates(cv=0.10, tolerance=0.10, true_change=0.0,
                                num_baseline=5, num_current=3)
    assert naive > 0.05     # a plain "-10%" threshold would flake on about 1 run in 10
    assert called <= 0.01


def test_gate_catches_a_30_percent_drop_through_the_same_noise():
    called, _ = _gate_rates(cv=0.10, tolerance=0.10, true_change=-0.30,
                            num_baseline=5, num_current=5)
    assert called >= 0.9
    called, _ = _gate_rates(cv=0.05, tolerance=0.10, true_change=-0.30,
                            num_baseline=5, num_current=3)
    assert called == 1.0
