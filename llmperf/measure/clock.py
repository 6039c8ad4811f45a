"""One clock for load generators on several hosts: each worker's wall-clock offset to the
coordinator's, measured by ping-pong probes.

A probe is three readings: the coordinator's wall clock when it asks (t0), the worker's when
it answers (w), the coordinator's when the answer is back (t1). Whatever the two one-way
delays, w was read somewhere in [t0, t1] of the coordinator's time, so

    offset = w - (t0 + t1) / 2      is off by at most      (t1 - t0) / 2.

Of several probes the one with the shortest round trip bounds the offset most tightly
(Cristian's algorithm, as NTP's clock filter and AIPerf's workers use it): its midpoint is
the estimate and half its round trip the uncertainty. Probing again later gives the drift:
the change of the offset over the time between the two estimates.

Per-request latencies never use offsets: each is a difference of one worker's own
perf_counter readings. An offset only places a worker's records, and the intended arrivals
it sends at, on the coordinator's timeline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

PROBES = 16  # probes per estimate; the fastest of them is kept

Probe = Callable[[], int]  # the worker's wall clock, in ns, read when the call arrives


@dataclass(frozen=True)
class OffsetEstimate:
    """worker clock - coordinator clock, from the probe with the shortest round trip."""

    offset_s: float
    uncertainty_s: float  # half that round trip: the offset is within +- this
    rtt_s: float
    at_unix_s: float  # the coordinator's wall clock at that probe's midpoint

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def estimate_offset(probe: Probe, probes: int = PROBES,
                    now_ns: Callable[[], int] = time.time_ns) -> OffsetEstimate:
    """`probes` round trips to `probe`; the offset of the shortest one."""
    best: OffsetEstimate | None = None
    for _ in range(probes):
        t0 = now_ns()
        worker_ns = probe()
        t1 = now_ns()
        rtt_ns = t1 - t0
        if best is None or rtt_ns / 1e9 < best.rtt_s:
            midpoint_ns = (t0 + t1) / 2
            best = OffsetEstimate((worker_ns - midpoint_ns) / 1e9, rtt_ns / 2e9, rtt_ns / 1e9,
                                  midpoint_ns / 1e9)
    if best is None:
        raise ValueError("estimate_offset needs at least one probe")
    return best


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

    @property
    def error_s(self) -> float:
        """How far the worker's schedule sits off the coordinator's timeline, at worst: the
        offset left uncorrected (none, with correction on), its uncertainty and the drift."""
        return abs(self.first.offset_s - self.applied_offset_s) + self.uncertainty_s + abs(self.drift_s)

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
            "estimates": [e.to_dict() for e in self.estimates],
        }
