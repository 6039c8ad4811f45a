"""Whether a run's figures can be trusted, as a list of named checks.

A check reads the summary (and the scenario's thresholds) and says ok or not, with
the numbers behind its verdict. Later stages add checks by appending to `CHECKS`.
A check that is not `blocking` is a warning: it is shown, but the run stays valid. The
checks against the server's own account are in validity_server.py; the Check itself in
check.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmperf.measure.check import Check
from llmperf.measure.check import ms as _ms
from llmperf.measure.validity_server import prefix_cache_unexpected, server_agrees, split_closes
from llmperf.workload.scenario import ValidityConfig


def warmup_done(summary: dict[str, Any], criteria: ValidityConfig) -> Check:
    n, done = summary["num_warmup"], summary["num_warmup_completed"]
    if n == 0:  # scenario.warmup_requests=0: the user chose to measure from cold
        return Check("warmup", True, "no warmup requested")
    return Check("warmup", done == n, f"{done} of {n} warmup requests completed")


def min_duration(summary: dict[str, Any], criteria: ValidityConfig) -> Check:
    d = summary["duration_s"]
    return Check(
        "min_duration",
        d >= criteria.min_duration_s,
        f"measured {d:.2f} s; need >= {criteria.min_duration_s} s",
    )


def min_completed(summary: dict[str, Any], criteria: ValidityConfig) -> Check:
    n = summary["num_completed"]
    return Check(
        "min_completed",
        n >= criteria.min_completed,
        f"{n} completed; need >= {criteria.min_completed}",
    )


def error_rate(summary: dict[str, Any], criteria: ValidityConfig) -> Check:
    failed, total = summary["num_failed"], summary["num_requests"]
    rate = failed / total if total else 1.0
    return Check(
        "error_rate",
        total > 0 and rate <= criteria.max_error_rate,
        f"{failed} of {total} failed ({rate:.1%}); allowed {criteria.max_error_rate:.1%}",
    )


def not_interrupted(summary: dict[str, Any], criteria: ValidityConfig) -> Check:
    interrupted = summary["interrupted"]
    return Check(
        "not_interrupted",
        not interrupted,
        "interrupted by SIGINT" if interrupted else "ran to the end",
    )


def not_saturated(summary: dict[str, Any], criteria: ValidityConfig) -> Check:
    """A run stopped by the over-saturation detector measured a queue, not the engine."""
    if not summary.get("saturated"):
        return Check("not_saturated", True, "the offered load was held")
    return Check("not_saturated", False, summary["saturation_detail"])


def _pct(share: float | None) -> str:
    return "n/a" if share is None else f"{share:.0%}"


# Late event-loop wake-ups count toward a verdict only from this many on: a short run has a
# few dozen probes, and one stall of the machine is not the client falling behind.
MIN_LATE_PROBES = 3


def client_kept_up(summary: dict[str, Any], criteria: ValidityConfig) -> Check:
    """The load generator sent on time, and when it did not, why (llmperf/measure/client_cpu.py).

    Late is a share of requests (client delay past `max_client_delay_s`) or of event-loop
    wake-ups, not a p99: over 48 requests a p99 is the one worst. When too many were late,
    the cause is named, checked in this order:
      connection pool  most late requests waited for a connection while as many requests as
                       `engine.max_connections` were in flight: a configuration error
      client CPU       the event loop was busy on a core for `max_client_cpu_share` of the
                       window (`client_cpu_share`: its CPU less its idle spin before each
                       send, `client_spin_share`, which any work would have taken over)
      garbage collector  a collection in a client process stopped its loop longer than
                       `max_client_delay_s` (`client_gc_max_pause_s`): the process's own
                       work, however idle the loop was otherwise
      own stalls       neither, and the loops waited for a core less than half the time
                       they stood still (`client_runqueue_wait_total_share` against
                       `client_stall_share`): no other process held the cores; a long turn of
                       a loop, or another thread of its process holding Python's lock, did
      host contention  neither: the client waited to run while another process held the
                       cores. A warning, unless the delay moved the figures (mean client delay
                       over `max_delay_share_of_ttft` of the mean TTFT)
    A client that kept up but whose loop was busy near a whole core gets a warning."""
    late = summary.get("client_late_fraction")
    if late is None:
        return Check("client_kept_up", True, "nothing dispatched")
    bound_ms = criteria.max_client_delay_s * 1e3
    delay = summary.get("client_delay_s") or {}
    loop_late = summary.get("event_loop_late_fraction") or 0.0
    if (summary.get("event_loop_late_probes") or 0) < MIN_LATE_PROBES:
        loop_late_counted = 0.0  # one or two stalls in a short run's few probes are no trend
    else:
        loop_late_counted = loop_late
    share, wait = summary.get("client_cpu_share"), summary.get("client_runqueue_wait_share")
    spin = summary.get("client_spin_share")
    figures = (
        f"{late:.1%} of requests sent over {bound_ms:g} ms late (client delay median "
        f"{(delay.get('median') or 0.0) * 1e3:.2f} ms, max {(delay.get('max') or 0.0) * 1e3:.1f} ms), "
        f"{loop_late:.1%} of event-loop wake-ups; event loop busy on a core {_pct(share)} of the "
        f"window (its idle spin before sends, {_pct(spin)}, left out), waiting for one {_pct(wait)}"
    )
    if max(late, loop_late_counted) <= criteria.max_late_fraction:
        if share is not None and share >= criteria.max_client_cpu_share:
            return Check("client_kept_up", False, "client near its CPU limit: " + figures +
                         "; add scenario.client.workers before raising the load", blocking=False)
        return Check("client_kept_up", True, "the client kept up: " + figures)
    limit = (summary.get("engine") or {}).get("max_connections")
    in_flight = summary.get("client_max_in_flight") or 0
    pool_late = summary.get("client_pool_late_fraction") or 0.0
    if limit is not None and 0 < pool_late and pool_late >= late / 2 and in_flight >= limit:
        return Check("client_kept_up", False, (
            f"connection pool exhausted: {pool_late:.1%} of requests waited over {bound_ms:g} ms "
            f"for a connection, every one of engine.max_connections={limit} busy with up to "
            f"{in_flight} requests in flight; raise engine.max_connections to at least {in_flight}"))
    if share is not None and share >= criteria.max_client_cpu_share:
        return Check("client_kept_up", False, (
            f"client CPU-bound: {figures}; its own work was the limit: add load-generator "
            "processes (scenario.client.workers) or lower the load"))
    ttft = (summary.get("ttft_s") or {}).get("mean")
    moved = bool(ttft) and (delay.get("mean") or 0.0) > criteria.max_delay_share_of_ttft * ttft
    weighed = (f"mean client delay {(delay.get('mean') or 0.0) * 1e3:.2f} ms against a mean TTFT "
               f"of {ttft * 1e3:.1f} ms" if ttft else "no TTFT to weigh it against")
    effect = f"({weighed}: the figures {'moved' if moved else 'did not move'})"
    gc_max = summary.get("client_gc_max_pause_s") or 0.0
    if gc_max > criteria.max_client_delay_s:
        return Check("client_kept_up", False, (
            f"client garbage collection: a collection stopped its loop for {gc_max * 1e3:.1f} ms "
            f"({_pct(summary.get('client_gc_pause_share'))} of the window in collections); "
            f"{figures}; the client's own work, not the host's: what the client process holds "
            f"was scanned (add scenario.client.workers: each holds less) {effect}"),
            blocking=moved)
    stalled, waited = summary.get("client_stall_share"), summary.get("client_runqueue_wait_total_share")
    if stalled and waited is not None and waited < stalled / 2:
        return Check("client_kept_up", False, (
            f"client stalls of its own: {figures}; its loops stood still at least "
            f"{_pct(stalled)} of the window and waited for a core {_pct(waited)}, so no other "
            "process held them: a long turn of the loop, or another thread of its process "
            "holding Python's lock (an in-process engine, a library), stopped it; run the engine "
            f"in a process of its own (llmperf-serve) or add scenario.client.workers {effect}"),
            blocking=moved)
    holders = ("another process (the server?) holds the cores" if limit is not None else
               "the engine's own threads in this process, or another process, hold the cores")
    return Check("client_kept_up", False, (
        f"host CPU contention: {figures}; {holders}: pin them "
        f"apart or run the client on another host {effect}"), blocking=moved)


def token_counts_agree(summary: dict[str, Any], criteria: ValidityConfig) -> Check:
    """The chunks the client counted as tokens and the server's usage agree (a warning)."""
    n = summary.get("num_token_count_mismatches")
    if not n:
        return Check("token_counts_agree", True, "chunks and the server's usage agree"
                     if n == 0 else "not measured", blocking=False)
    return Check("token_counts_agree", False, (
        f"{n} request{'s' * (n > 1)} streamed more token chunks than the server's usage counts: "
        "a chunk without a token was taken for one, so token times, ITL and TPOT are off"),
        blocking=False)


def no_throttling(summary: dict[str, Any], criteria: ValidityConfig) -> Check:
    """Clocks held down by power, heat or the board (NVML) make figures unrepresentative."""
    throttled = summary.get("throttled")
    if throttled is None:
        return Check("no_throttling", True, "not measured (no NVML)")
    reasons = ", ".join(summary.get("throttle_reasons") or []) or "none"
    return Check("no_throttling", not throttled, f"throttle reasons seen: {reasons}")


def server_alive(summary: dict[str, Any], criteria: ValidityConfig) -> Check:
    """A server llmperf launched that died mid-run failed the requests it had left."""
    server = summary.get("server")
    if not server:
        return Check("server_alive", True, "no server launched")
    if server.get("died_during_run"):
        return Check("server_alive", False, summary.get("stopped") or "the server exited during the run")
    return Check("server_alive", True, f"{server['family']} ran to the end")


# The offered rate may miss the rate asked by this share before the run warns.
MAX_OFFERED_RATE_ERROR_PCT = 5.0


def offered_rate_held(summary: dict[str, Any], criteria: ValidityConfig) -> Check:
    """The load generator delivered the rate asked, within 5% (a warning; see
    llmperf/measure/steady.py). The intended arrivals' own rate says whose the gap is: a short
    random schedule's draw, or a client that sent late."""
    asked, offered = summary.get("asked_rate_rps"), summary.get("offered_rate_rps")
    error = summary.get("offered_rate_error_pct")
    if asked is None or offered is None or error is None:
        return Check("offered_rate_held", True, "not measured (no single rate asked: closed loop,"
                     " ramp, trace, offline or sessions)", blocking=False)
    detail = f"offered {offered:.4g} req/s against {asked:.4g} asked ({error:+.1f}%)"
    scheduled = summary.get("scheduled_rate_rps")
    ok = abs(error) <= MAX_OFFERED_RATE_ERROR_PCT
    if not ok and scheduled is not None:
        drawn = 100.0 * (scheduled / asked - 1.0)
        detail += (f"; the schedule itself drew {scheduled:.4g} req/s ({drawn:+.1f}%): "
                   + ("a short random schedule, run more requests"
                      if abs(drawn) > MAX_OFFERED_RATE_ERROR_PCT
                      else "the client sent late (see client_kept_up)"))
    return Check("offered_rate_held", ok,
                 detail + f"; expected within ±{MAX_OFFERED_RATE_ERROR_PCT:g}%", blocking=False)


def stage_rates_held(summary: dict[str, Any], criteria: ValidityConfig) -> Check:
    """`offered_rate_held` for each stage of scenario.stages that asked a rate (a warning)."""
    judged = [(s["stage"], offered_rate_held(s, criteria)) for s in summary.get("stages") or []
              if s.get("ran") and s.get("asked_rate_rps") is not None]
    if not judged:
        return Check("stage_rates_held", True, "not measured (no stage asked a rate)",
                     blocking=False)
    missed = [f"stage {i}: {c.detail}" for i, c in judged if not c.ok]
    if missed:
        return Check("stage_rates_held", False, "; ".join(missed), blocking=False)
    return Check("stage_rates_held", True, f"each of {len(judged)} stages offered its rate within"
                 f" ±{MAX_OFFERED_RATE_ERROR_PCT:g}%", blocking=False)



# What makes a worker's clock error (llmperf/measure/clock.py's ClockTrack.cause), in words
CLOCK_CAUSES = {
    "unapplied": "its offset was not applied (scenario.client.clock_correction=false)",
    "moved": "its clock moved during the run (a probe during the load read it off the applied"
             " offset by more than its uncertainty: the host's clock was stepped or slewed)",
    "drift": "its clock drifted over the run by more than the probes' uncertainty (the hosts'"
             " clocks run at different rates: synchronize them, or run shorter)",
    "round trips": "the probes' round trips were too slow to bound it (a busy coordinator or"
                   " network)",
}


def clocks_agree(summary: dict[str, Any], criteria: ValidityConfig) -> Check:
    """Workers on other hosts (backend=ray) sent on the coordinator's timeline: each one's
    clock offset was measured (and applied) to within max_clock_uncertainty_s, drift included
    (llmperf/measure/clock.py)."""
    clocks = summary.get("clocks") or []
    if not clocks:
        return Check("clocks_agree", True, "one clock (no workers on clocks of their own)")
    limit = criteria.max_clock_uncertainty_s
    worst = max(clocks, key=lambda c: c["error_s"])
    after = worst.get("last_uncertainty_s")
    figures = (f"worst worker {worst['worker']}: offset {_ms(worst['offset_s'])}, applied"
               f" {_ms(worst['applied_offset_s'])}, uncertainty ±{_ms(worst['uncertainty_s'])}"
               + (f" (±{_ms(after)} after the load)" if after is not None else "")
               + f", drift {_ms(worst['drift_s'])}")
    if worst["error_s"] <= limit:
        return Check("clocks_agree", True, f"{len(clocks)} workers within {_ms(limit)}: {figures}")
    cause = CLOCK_CAUSES.get(worst.get("cause"), CLOCK_CAUSES["round trips"])
    return Check("clocks_agree", False, f"worker {worst['worker']}'s schedule may be"
                 f" {_ms(worst['error_s'])} off the coordinator's timeline, past"
                 f" {_ms(limit)}: {cause}; {figures}")


def no_worker_lost(summary: dict[str, Any], criteria: ValidityConfig) -> Check:
    """Every load worker ran to its end (backend=ray: a worker's actor or node may die)."""
    lost = summary.get("workers_lost") or []
    if not lost:
        return Check("no_worker_lost", True, "every worker ran to its end")
    return Check("no_worker_lost", False, "; ".join(
        f"worker {w['worker']}{' on node ' + str(w['node'])[:12] if w.get('node') else ''} lost"
        f" at {w['at_s']:.2f} s ({w['reason']}): its {w['in_flight']} requests in flight recorded"
        " as 'worker lost'" for w in lost))


CHECKS: list[Callable[[dict[str, Any], ValidityConfig], Check]] = [
    warmup_done,
    min_duration,
    min_completed,
    error_rate,
    not_interrupted,
    not_saturated,
    client_kept_up,
    token_counts_agree,
    no_throttling,
    server_agrees,
    split_closes,
    prefix_cache_unexpected,
    server_alive,
    offered_rate_held,
    stage_rates_held,
    clocks_agree,
    no_worker_lost,
]


def check_validity(summary: dict[str, Any], criteria: ValidityConfig) -> list[Check]:
    return [check(summary, criteria) for check in CHECKS]
