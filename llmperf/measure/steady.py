"""The steady window's figures beside the whole run's, and the rate the load generator
delivered beside the rate asked.

**In flight.** The measured requests in flight at time t: dispatched (handed to the engine,
`dispatch_s`) at or before t and not yet ended (`end_s`). At one instant an end is counted
before a dispatch, so a closed loop's slot that frees and refills at once never reads C + 1.

**The plateau** is the in-flight level the load settles at:

- closed loop at concurrency C: C, the level the loop is built to hold. Its in-flight count
  only dips below C for the instant between a request's end and its successor's dispatch,
  so "reached C" is exact, with no estimate to make.
- open loop: the time-weighted median of the in-flight count over the dispatch span (the
  first to the last measured dispatch), and at least 1. In a steady state Little's law holds
  the count around rate × latency: the median is that central level, read off the run
  itself whatever the rate and the latency, and robust to what a mean or a high quantile is
  not: the ramp-up is a short part of the span and barely moves it, and a burst (a Poisson
  clump, a slow request) that a p90 or a maximum would take for the plateau is not reached
  again for a long while, which would throw most of a good run away. A run too light to keep
  a request in flight half of the time has a median of 0: its plateau is 1, reached at
  the first dispatch (no ramp-up to cut). An overloaded open loop has no plateau (its count
  climbs until the last dispatch): the median then cuts the first half or so of the span,
  and `not_saturated` and the offered rate speak to it.

**The steady window** runs from the first time the in-flight count reaches the plateau to
the last measured dispatch. Its requests are those dispatched inside it, after the start and
up to the end inclusive: the request whose dispatch brought the count to the plateau was
sent into a system still filling (a closed loop's first C requests all start together), the
ramp-up; the tail, after the last dispatch, drains with fewer requests in flight, and no
request starts in it. Its figures are those of `compute_metrics` over those requests: the
latency distributions of the completed ones, and throughputs over the window's duration (in
a steady state as many requests start in a window as end in it, so requests started ÷ the
window is the rate the system sustains). Fewer than `MIN_STEADY_REQUESTS` requests in the
window (or fewer completed: a run stopped early aborts the requests it had in flight), or no
plateau at all (everything dispatched at one instant: an offline run, or a closed loop with
no more requests than users), leave the figures null and `steady_window_reason` says why.

**The offered rate** is what the load generator delivered: (measured dispatches − 1) ÷ the
dispatch span (n dispatches bound n − 1 gaps, so a constant schedule at r reads exactly r).
The asked rate is `scenario.arrival.rate_rps` for the processes that hold one rate
(constant, poisson, gamma); null for a closed loop, a ramp (its rate changes), a trace,
offline, and multi-turn sessions (the arrival process starts sessions, not requests).
`scheduled_rate_rps` is the same ratio over the intended arrivals: the rate the schedule
itself drew, which for a short Poisson or gamma schedule differs from the asked rate by
chance, where the offered rate differs from it when the client sent late.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from llmperf.measure.metrics import distribution, e2e_s, itl_s, meets_slo, tpot_s, ttft_s
from llmperf.measure.records import RequestRecord
from llmperf.workload.arrivals import ARRIVALS, ArrivalConfig
from llmperf.workload.scenario import SloConfig

MIN_STEADY_REQUESTS = 2
FIXED_RATE_PROCESSES = ("constant", "poisson", "gamma")
STEADY_DISTRIBUTIONS = ("ttft_s", "tpot_s", "itl_s", "e2e_s")
STEADY_RATES = ("request_throughput_rps", "output_throughput_tps", "total_throughput_tps",
                "goodput_rps")


def in_flight_curve(records: Iterable[RequestRecord]) -> list[tuple[float, int]]:
    """(t, requests in flight from t on) at each dispatch and end, in time order."""
    events = sorted([(r.dispatch_s, 1) for r in records] + [(r.end_s, -1) for r in records])
    curve, count = [], 0
    for t, step in events:  # (t, -1) sorts before (t, 1): an end before a dispatch
        count += step
        curve.append((t, count))
    return curve


def median_in_flight(curve: Sequence[tuple[float, int]], t0: float, t1: float) -> int | None:
    """The time-weighted median of the in-flight count over [t0, t1]; None for an empty span."""
    time_at: Counter[int] = Counter()
    for (t, count), (t_next, _) in zip(curve, curve[1:], strict=False):
        a, b = max(t, t0), min(t_next, t1)
        if b > a:
            time_at[count] += b - a
    total = sum(time_at.values())
    if total <= 0:
        return None
    seen = 0.0
    for count in sorted(time_at):
        seen += time_at[count]
        if seen >= total / 2:
            return count
    return max(time_at)


def steady_window(
    records: Sequence[RequestRecord], concurrency: int | None
) -> tuple[float | None, float | None, int | None, str | None]:
    """(start, end, plateau, reason): see the module's docstring; reason is None when the
    window holds a span, else says why there is none (start and end may still be set)."""
    if not records:
        return None, None, None, "no measured request"
    dispatches = sorted(r.dispatch_s for r in records)
    t0, t1 = dispatches[0], dispatches[-1]
    curve = in_flight_curve(records)
    if concurrency is not None:
        plateau = concurrency
    else:
        median = median_in_flight(curve, t0, t1)
        if median is None:
            return None, None, None, (f"all {len(records)} measured requests were dispatched at"
                                      " one instant: no dispatch span, no steady state")
        plateau = max(1, median)
    start = next((t for t, count in curve if count >= plateau), None)
    if start is None or start > t1:
        return None, t1, plateau, (f"the in-flight count never reached its plateau of {plateau}"
                                   " before the last dispatch")
    if start >= t1:
        return start, t1, plateau, (f"the in-flight count reached its plateau of {plateau} only"
                                    " at the last dispatch: no steady window")
    return start, t1, plateau, None


def steady_metrics(records: Iterable[RequestRecord], slo: SloConfig,
                   concurrency: int | None = None) -> dict[str, Any]:
    """summary.json's `steady_*` figures: the whole run's key figures over the steady window.

    `concurrency`: the closed loop's (its plateau); None for an open loop."""
    measured = [r for r in records if not r.warmup]
    start, end, plateau, reason = steady_window(measured, concurrency)
    inside = [] if reason else [r for r in measured if start < r.dispatch_s <= end]
    completed = [r for r in inside if r.ok]
    if reason is None and len(inside) < MIN_STEADY_REQUESTS:
        reason = (f"{len(inside)} request{'s' * (len(inside) != 1)} dispatched inside the steady"
                  f" window; its figures need at least {MIN_STEADY_REQUESTS}")
    elif reason is None and len(completed) < MIN_STEADY_REQUESTS:
        reason = (f"{len(completed)} of the {len(inside)} requests dispatched inside the steady"
                  f" window completed; its figures need at least {MIN_STEADY_REQUESTS}")
    out: dict[str, Any] = {
        "steady_window_start_s": start,
        "steady_window_end_s": end,
        "steady_duration_s": end - start if start is not None and end is not None else None,
        "steady_in_flight": plateau,
        "steady_num_requests": len(inside),
        "steady_window_reason": reason,
    }
    out["steady_num_completed"] = len(completed)
    if reason is not None:
        out.update(dict.fromkeys(f"steady_{k}" for k in (*STEADY_DISTRIBUTIONS, *STEADY_RATES)))
        return out
    duration_s = end - start
    tokens_in = sum(r.input_tokens for r in completed)
    tokens_out = sum(r.output_tokens for r in completed)
    out.update({
        "steady_ttft_s": distribution([t for r in completed if (t := ttft_s(r)) is not None]),
        "steady_tpot_s": distribution([t for r in completed if (t := tpot_s(r)) is not None]),
        "steady_itl_s": distribution([g for r in completed for g in itl_s(r)]),
        "steady_e2e_s": distribution([e2e_s(r) for r in completed]),
        "steady_request_throughput_rps": len(completed) / duration_s,
        "steady_output_throughput_tps": tokens_out / duration_s,
        "steady_total_throughput_tps": (tokens_in + tokens_out) / duration_s,
        "steady_goodput_rps": sum(meets_slo(r, slo) for r in completed) / duration_s,
    })
    return out


def _rate(times: Sequence[float]) -> float | None:
    """(n − 1) ÷ the span of n times; None with fewer than 2 or no span."""
    if len(times) < 2:
        return None
    span = max(times) - min(times)
    return (len(times) - 1) / span if span > 0 else None


def asked_rate(arrival: ArrivalConfig | None, sessions: bool = False) -> float | None:
    """The one rate the scenario asked for, where it asks for one (see the module's docstring)."""
    if arrival is None or sessions or arrival.process not in FIXED_RATE_PROCESSES:
        return None
    return arrival.rate_rps


def offered_rate_metrics(records: Iterable[RequestRecord], arrival: ArrivalConfig | None,
                         sessions: bool = False) -> dict[str, Any]:
    """summary.json's `asked_rate_rps`, `offered_rate_rps`, `scheduled_rate_rps` and
    `offered_rate_error_pct` (offered ÷ asked − 1, × 100; null where nothing was asked)."""
    measured = [r for r in records if not r.warmup]
    closed = arrival is not None and ARRIVALS[arrival.process].closed_loop
    asked = asked_rate(arrival, sessions)
    offered = _rate([r.dispatch_s for r in measured])
    scheduled = None if closed else _rate([r.arrival_s for r in measured])
    error = 100.0 * (offered / asked - 1.0) if asked and offered is not None else None
    return {"asked_rate_rps": asked, "offered_rate_rps": offered,
            "scheduled_rate_rps": scheduled, "offered_rate_error_pct": error}
