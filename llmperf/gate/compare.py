"""The verdict for one metric: pass, REGRESSION or improved, against tolerance and noise."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmperf.gate.errors import GateError
from llmperf.gate.metric_spec import MetricSpec, Tolerance
from llmperf.gate.stats import Change, median_change
from llmperf.measure.catalog import HIGHER

PASS = "pass"
WITHIN_NOISE = "pass (within noise)"
REGRESSION = "REGRESSION"
IMPROVED = "improved — update the baseline"

# A change of exactly the tolerance passes, whatever the last bits of the float say.
_SLACK = 1e-9


@dataclass(frozen=True)
class MetricResult:
    spec: MetricSpec
    tolerance: Tolerance
    baseline: tuple[float, ...]
    current: tuple[float, ...]
    change: Change
    verdict: str

    @property
    def is_regression(self) -> bool:
        return self.verdict == REGRESSION


def judge(spec: MetricSpec, tolerance: Tolerance, baseline: Sequence[float],
          current: Sequence[float]) -> MetricResult:
    """Regression only when the whole noise interval of the change lies beyond the tolerance.

    "Worse" is a drop for higher-is-better metrics and a rise for the others. The best case
    the interval allows must still be worse than the tolerance: a change past the tolerance
    that the noise could explain passes, marked "within noise". Improvements mirror this.
    """
    if tolerance.relative and any(v == 0 for v in baseline):
        raise GateError(f"the baseline of {spec.name} holds 0, so a relative tolerance means"
                        f" nothing; give an absolute one, e.g. {spec.name}:"
                        f"{'-' if spec.direction == HIGHER else '+'}0.02")
    change = median_change(baseline, current, tolerance.relative)
    worse = -1.0 if spec.direction == HIGHER else 1.0
    best_case, worst_case = sorted((worse * change.low, worse * change.high))
    limit = tolerance.amount + _SLACK
    if best_case > limit:
        verdict = REGRESSION
    elif worst_case < -limit:
        verdict = IMPROVED
    elif abs(worse * change.point) > limit:
        verdict = WITHIN_NOISE
    else:
        verdict = PASS
    return MetricResult(spec, tolerance, tuple(baseline), tuple(current), change, verdict)
