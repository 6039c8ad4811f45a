"""The paired statistic of A/B mode against scipy's exact Wilcoxon test and hand-made cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import wilcoxon

from llmperf.gate.paired import critical_count, paired_change, walsh_averages


@pytest.mark.parametrize("n, k", [(5, 1), (6, 3), (8, 6), (10, 11), (12, 18), (20, 61)])
def test_critical_counts_match_the_signed_rank_table(n, k):
    # one-sided 5% lower critical values T (k = T + 1): 0, 2, 5, 10, 17, 60 (standard tables)
    assert critical_count(n) == k


@pytest.mark.parametrize("n", [5, 8, 12])
def test_interval_ends_where_the_exact_wilcoxon_test_starts_rejecting(n):
    rng = np.random.default_rng(n)
    logs = rng.normal(0.05, 0.03, n)
    change = paired_change([1.0] * n, [math.exp(r) for r in logs])
    low, high = math.log1p(change.low), math.log1p(change.high)

    def kept(shift: float) -> bool:  # not rejected by the two-sided exact test at 10%
        return wilcoxon(logs - shift, method="exact").pvalue > 0.10 - 1e-12

    eps = 1e-7
    assert kept(low + eps) and kept(high - eps)
    assert not kept(low - eps) and not kept(high + eps)


def test_five_pairs_give_the_range_of_the_walsh_averages_and_their_median():
    base = [10.0, 10.0, 10.0, 10.0, 10.0]
    head = [10.0 * math.exp(r) for r in (0.01, 0.02, 0.03, 0.04, 0.10)]
    change = paired_change(base, head)
    walsh = walsh_averages([0.01, 0.02, 0.03, 0.04, 0.10])
    assert len(walsh) == 15
    assert change.low == pytest.approx(math.expm1(0.01))
    assert change.high == pytest.approx(math.expm1(0.10))
    assert change.point == pytest.approx(math.expm1(walsh[7]))  # 0.03 here
    assert change.point == pytest.approx(math.expm1(0.03))


def test_a_machine_wide_drift_cancels_out_of_the_pairs():
    drift = [1.0, 1.3, 0.8, 1.6, 1.1, 0.9]  # the machine's speed, pair by pair
    base = [0.010 * d for d in drift]
    head = [0.011 * d for d in drift]
    change = paired_change(base, head)
    assert change.point == pytest.approx(0.10)
    assert change.low == pytest.approx(0.10) and change.high == pytest.approx(0.10)


def test_too_few_pairs_or_non_positive_figures_are_refused():
    with pytest.raises(ValueError, match="at least 5 pairs"):
        paired_change([1.0] * 4, [1.0] * 4)
    with pytest.raises(ValueError, match="> 0"):
        paired_change([1.0] * 5, [1.0, 1.0, 0.0, 1.0, 1.0])
