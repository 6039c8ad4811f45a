"""How far a figure moves with no change at all, from a baseline's own repeats, and the
tolerance that keeps such a move inside half of it.

A baseline recorded from N repeats of unchanged code holds its own A/A test: split the repeats
every way into the K a CI run would bring (`--ci-repeats`) and the N - K left, and take the
change between the two medians as the gate computes it. The largest of those changes is the
A/A spread: what the gate will see from noise alone, on this machine, at K repeats. A
tolerance under twice it puts an unchanged commit past half its tolerance, on the way to a
"within noise" pass that reads as a near miss, and now and then a false alarm.

`llmperf-gate --update` prints the spread of every metric beside its tolerance, warns where
the tolerance is under twice it, and with `--size-tolerances` widens each such tolerance to
twice the spread, rounded up to a whole 5% (relative) or to two significant digits (absolute).
It never narrows one: a tolerance set by hand for a claim stays the floor.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from llmperf.gate.metric_spec import Tolerance

# The splits of the repeats tried at most (every split up to this, else a seeded sample).
MAX_SPLITS = 2000


@dataclass(frozen=True)
class Spread:
    """The largest A/A change of one metric (a fraction when relative, else units)."""

    largest: float
    splits: int  # how many splits of the repeats it is the largest of
    relative: bool

    def text(self) -> str:
        return f"{self.largest * 100:.1f}%" if self.relative else f"{self.largest:.3g}"

    def sized(self, tolerance: Tolerance) -> Tolerance:
        """`tolerance`, widened to twice the spread where it is under that."""
        need = 2 * self.largest
        if tolerance.amount >= need:
            return tolerance
        if tolerance.relative:
            return Tolerance(math.ceil(need * 20 - 1e-9) / 20, relative=True)
        step = 10.0 ** (math.floor(math.log10(need)) - 1)  # two significant digits
        return Tolerance(math.ceil(need / step - 1e-9) * step, relative=False)


def aa_spread(values: Sequence[float], ci_repeats: int, relative: bool) -> Spread | None:
    """The largest |median(K of the repeats) vs median(the rest)| change; None with fewer than
    K + 2 repeats (the rest must have a median of its own)."""
    n = len(values)
    if n < ci_repeats + 2 or ci_repeats < 1:
        return None
    changes = []
    for chosen in itertools.islice(itertools.combinations(range(n), ci_repeats), MAX_SPLITS):
        current = median(values[i] for i in chosen)
        rest = median(values[i] for i in range(n) if i not in chosen)
        if relative:
            if rest == 0:
                return None
            changes.append(abs(current / rest - 1))
        else:
            changes.append(abs(current - rest))
    return Spread(max(changes), len(changes), relative)


def spread_notes(name: str, spread: Spread | None, tolerance: Tolerance, direction: str,
                 ci_repeats: int) -> list[str]:
    """A warning where the tolerance is under twice the A/A spread."""
    if spread is None or tolerance.amount >= 2 * spread.largest:
        return []
    return [f"{name}: with no change, a median of {ci_repeats} of these repeats moved {spread.text()}"
            f" against the others' ({spread.splits} splits); its tolerance"
            f" {tolerance.text(direction)} is under twice that, so unchanged code can read past"
            f" half of it: widen it to {spread.sized(tolerance).text(direction)}"
            " (--size-tolerances does) or add repeats"]
