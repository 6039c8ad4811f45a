import numpy as np
import pytest
from scipy.stats import norm

from llmperf.gate.stats import median_change


def test_single_repeats_give_the_point_change_and_no_band():
    change = median_change([100.0], [70.0], relative=True)
    assert change.point == pytest.approx(-0.30)
    assert change.low == change.high == change.point
    assert not change.has_noise_band


def test_absolute_change_is_the_difference_of_medians():
    change = median_change([0.10, 0.12, 0.11], [0.15, 0.16, 0.14], relative=False)
    assert change.point == pytest.approx(0.15 - 0.11)
    assert change.low <= change.point <= change.high


def test_single_current_repeat_borrows_the_baseline_spread():
    # Baseline medians of 3 draws from {90,100,110} take each value with probability >= 7/27;
    # the single current run, with the baseline's relative spread, is 90, 100 or 110 with 1/3
    # each. Both extreme pairings (90 vs 110, 110 vs 90) carry 1/3 * 7/27 = 8.6% > 5%, so the
    # 90% interval ends exactly at them.
    change = median_change([90.0, 100.0, 110.0], [100.0], relative=True)
    assert change.point == pytest.approx(0.0)
    assert change.low == pytest.approx(90 / 110 - 1)
    assert change.high == pytest.approx(110 / 90 - 1)


def test_interval_is_reproducible_with_the_fixed_seed():
    b, c = [98.0, 103.0, 100.0, 97.0, 104.0], [91.0, 95.0, 99.0]
    first, second = median_change(b, c, True), median_change(b, c, True)
    assert (first.low, first.high) == (second.low, second.high)


def test_separated_samples_give_an_interval_on_one_side_of_zero():
    change = median_change([100, 101, 99, 100, 102], [80, 81, 79], relative=True)
    assert change.high < 0
    # every resampled median lies within the sample range, so the interval does too
    assert 79 / 102 - 1 <= change.low and change.high <= 81 / 99 - 1


def _lognormal_quantiles(n: int, cv: float = 0.1) -> np.ndarray:
    """n evenly spread quantiles of a lognormal around 100: a sample without luck in it."""
    return 100 * np.exp(cv * norm.ppf((np.arange(n) + 0.5) / n))


def test_interval_narrows_like_one_over_root_n():
    few = median_change(_lognormal_quantiles(3), _lognormal_quantiles(3), True)
    many = median_change(_lognormal_quantiles(30), _lognormal_quantiles(30), True)
    assert few.low < 0 < few.high and many.low < 0 < many.high
    # sqrt(3/30) = 0.32; allow for the coarse bootstrap distribution of a 3-sample median
    assert (many.high - many.low) / (few.high - few.low) == pytest.approx(0.32, abs=0.12)


def test_interval_covers_a_null_change_most_of_the_time():
    # The percentile bootstrap of a median undercovers a little on small samples; a 90%
    # interval should still cover zero in well over 80% of unchanged comparisons.
    rng = np.random.default_rng(3)
    covered = 0
    for _ in range(300):
        b, c = 100 * rng.lognormal(0, 0.1, 7), 100 * rng.lognormal(0, 0.1, 7)
        change = median_change(b, c, relative=True)
        covered += change.low <= 0 <= change.high
    assert covered / 300 > 0.82
