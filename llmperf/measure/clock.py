"""One clock for load generators on several hosts: each worker's wall-clock offset to the
coordinator's, measured by ping-pong probes.

A probe is three readings: the coordinator's wall clock when it asks (t0), the worker's when
it answers (w), the coordinator's when the answer is back (t1). Whatever the two one-way
delays, w was read somewhere in [t0, t1] of the coordinator's time, so

    offset = w - (t0 + t1) / 2      is off by at most      (t1 - t0) / 2.

Of several probes the one with the shortest round trip bounds the offset most tightly
(Cristian's algorithm, as NTP's clock filter and AIPerf's workers use it): its midpoint is
the estimate and half its round trip the uncertainty. On a busy host a few probes may all be
slow, so an estimate goes on probing, within a budget, until one is fast enough. Probing
again later gives the drift: the change of the offset over the time between the two
estimates.

Per-request latencies never use offsets: each is a difference of one worker's own
perf_counter readings. An offset only places a worker's records, and the intended arrivals
it sends at, on the coordinator's timeline.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

PROBES = 16  # probes per estimate at least; the fastest of them is kept
MAX_PROBES = 512  # and at most, while none is within the target uncertainty
PROBE_BUDGET_S = 1.0  # nor for longer than this

Probe = Callable[[], int]  # the worker's wall clock, in ns, read when the call arrives


@dataclass(frozen=True)
class OffsetEstimate:
    """worker clock - coordinator clock, from the probe with the shortest round trip."""

    offset_s: float
    uncertainty_s: float  # half that round trip: the offset is within +- this
    rtt_s: float
    at_unix_s: float  # the coordinator's wall clock at that probe's midpoint
    probes: int = 1  # how many round trips it took

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def estimate_offset(probe: Probe, probes: int = PROBES, now_ns: Callable[[], int] = time.time_ns,
                    target_s: float = math.inf, max_probes: int = MAX_PROBES,
                    budget_s: float = PROBE_BUDGET_S) -> OffsetEstimate:
    """The offset of the shortest of `probes` round trips to `probe`; while the shortest is
    not within `target_s` (half its round trip), more, up to `max_probes` or `budget_s`."""
    if probes < 1:
        raise ValueError("estimate_offset needs at least one probe")
    best: OffsetEstimate | None = None
    started_ns = now_ns()
    count = 0
    while count < probes or (best.uncertainty_s > target_s and count < max_probes
                             and now_ns() - started_ns < budget_s * 1e9):
        t0 = now_ns()
        worker_ns = probe()
        t1 = now_ns()
        count += 1
        rtt_ns = t1 - t0
        if best is None or rtt_ns / 1e9 < best.rtt_s:
            midpoint_ns = (t0 + t1) / 2
            best = OffsetEstimate((worker_ns - midpoint_ns) / 1e9, rtt_ns / 2e9, rtt_ns / 1e9,
                                  midpoint_ns / 1e9)
    return replace(best, probes=count)


@dataclass
class ClockTrack:
    """One worker's offsets over a run: the first estimate (applied to its schedule) and the
    later ones (drift)."""

    worker: int
    node: str | None
    estimates: list[OffsetEstimate]
    applied_offset_s: float  # what the worker's origin was corrected by (0 with correction off)

    @property
    def first(self) -> OffsetEstimate:
        return self.estimates[0]

    @property
    def uncertainty_s(self) -> float:
        return self.first.uncertainty_s

    @property
    def drift_s(self) -> float:
        """How far the offset moved from the first estimate to the last."""
        return self.estimates[-1].offset_s - self.first.offset_s

    @property
    def drift_s_per_s(self) -> float:
        span_s = self.estimates[-1].at_unix_s - self.first.at_unix_s
        return self.drift_s / span_s if span_s > 0 else 0.0

    def _off(self, estimate: OffsetEstimate) -> float:
        return abs(estimate.offset_s - self.applied_offset_s)

    def _bounds(self) -> tuple[float, float]:
        """The bound from the two ends, and what the estimates during the load prove."""
        first, last = self.first, self.estimates[-1]
        ends = max(self._off(first) + first.uncertainty_s, self._off(last) + last.uncertainty_s)
        proven = max((self._off(e) - e.uncertainty_s for e in self.estimates[1:-1]),
                     default=-math.inf)
        return ends, proven

    @property
    def error_s(self) -> float:
        """How far the worker's schedule sat off the coordinator's timeline, at worst.

        At an estimate's time the true offset is within its uncertainty of it, so the schedule
        (moved by `applied_offset_s`) was off by at most |offset - applied| + uncertainty
        there. Between the first estimate (before the load) and the last (after it) an offset
        that moves steadily is off by no more than at those two ends. An estimate taken while
        the load ran, slower for the load, only adds what it proves: |offset - applied| less
        its uncertainty (a step of the clock mid-run)."""
        return max(self._bounds())

    @property
    def cause(self) -> str:
        """What makes error_s: "unapplied" (the offset measured was not applied), "moved" (an
        estimate during the load shows the clock moved), "drift" (the last estimate's offset
        moved from the first past both uncertainties), else "round trips" (the probes'
        round trips alone)."""
        first, last = self.first, self.estimates[-1]
        ends, proven = self._bounds()
        if self._off(first) > first.uncertainty_s:
            return "unapplied"
        if proven >= ends:
            return "moved"
        if abs(self.drift_s) > first.uncertainty_s + last.uncertainty_s:
            return "drift"
        return "round trips"

    def to_dict(self) -> dict:
        return {
            "worker": self.worker,
            "node": self.node,
            "offset_s": self.first.offset_s,
            "uncertainty_s": self.uncertainty_s,
            "rtt_s": self.first.rtt_s,
            "applied_offset_s": self.applied_offset_s,
            "drift_s": self.drift_s,
            "drift_s_per_s": self.drift_s_per_s,
            "error_s": self.error_s,
            "last_uncertainty_s": self.estimates[-1].uncertainty_s,
            "cause": self.cause,
            "estimates": [e.to_dict() for e in self.estimates],
        }
