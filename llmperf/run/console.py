"""What a run prints: a live progress bar while the load runs, a compact table at the end."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from llmperf.measure.catalog import LATENCIES, MOMENTS_AFTER, MOMENTS_BEFORE, STAT_LABELS
from llmperf.measure.metrics import token_count_warning
from llmperf.measure.records import RequestRecord

UPDATE_INTERVAL_S = 0.1


class LoadProgress:
    """Requests done (warmup included), failures and output tokens/s, refreshed 4 times a second.

    Shown only on a terminal, so logs and tests get the final table alone.
    """

    def __init__(self, total: int | None, console: Console) -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[failed]} failed"),
            TextColumn("{task.fields[tokens_per_s]:>8.1f} tok/s"),
            TimeElapsedColumn(),
            console=console,
            disable=not console.is_terminal,
            refresh_per_second=4,
        )
        self._task = self._progress.add_task("requests", total=total, failed=0, tokens_per_s=0.0)
        self._start_s = time.perf_counter()
        self._tokens = 0
        self._failed = 0
        self._pending = 0  # requests done since the bar last took the counts
        self._next_s = 0.0

    def __enter__(self) -> LoadProgress:
        self._progress.start()
        self._start_s = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pending and not self._progress.disable:
            self._flush(time.perf_counter())
        self._progress.stop()

    def update(self, record: RequestRecord) -> None:
        """Count one request; the bar (on a terminal only) takes the counts at most 10 times a
        second, so a request costs the load generator's loop a few additions, not a redraw's
        bookkeeping (tens of microseconds, at thousands of requests a second)."""
        self._tokens += record.output_tokens
        self._failed += not record.ok
        self._pending += 1
        if self._progress.disable:
            return
        now_s = time.perf_counter()
        if now_s >= self._next_s:
            self._next_s = now_s + UPDATE_INTERVAL_S
            self._flush(now_s)

    def _flush(self, now_s: float) -> None:
        elapsed_s = max(now_s - self._start_s, 1e-9)
        self._progress.update(self._task, advance=self._pending, failed=self._failed,
                              tokens_per_s=self._tokens / elapsed_s)
        self._pending = 0


def _ms(stats: dict[str, float | None], key: str) -> str:
    value = stats.get(key)
    return "-" if value is None else f"{value * 1e3:.1f}"


def _num(value: float | None, fmt: str = ".2f") -> str:
    return "-" if value is None else format(value, fmt)


def client_line(summary: dict[str, Any]) -> str | None:
    """What the load generator cost: CPU per request and the busiest event loop's share of a core."""
    per_request, share = summary.get("client_cpu_per_request_s"), summary.get("client_cpu_share")
    if per_request is None or share is None:
        return None
    late = summary.get("client_late_fraction")
    return (f"client      {per_request * 1e3:.2f} ms CPU per request   event loop busy on a core "
            f"{share:.0%} of the window   {_num(summary.get('client_process_cpu_share'), '.2f')} "
            f"cores in all" + (f"   {late:.1%} of requests sent late" if late else ""))


def steady_lines(summary: dict[str, Any]) -> list[str]:
    """The steady window's key figures (or why it has none) and the rate offered against asked."""
    lines = []
    if "steady_window_reason" in summary:
        reason = summary["steady_window_reason"]
        if reason:
            lines.append(f"steady      no steady-window figures: {reason}")
        else:
            ttft, tpot = summary.get("steady_ttft_s") or {}, summary.get("steady_tpot_s") or {}
            lines.append(
                f"steady      {_num(summary['steady_window_start_s'])}-"
                f"{_num(summary['steady_window_end_s'])} s, {summary['steady_num_requests']}"
                f" requests at {summary['steady_in_flight']} in flight:   TTFT p50 "
                f"{_ms(ttft, 'median')} p99 {_ms(ttft, 'p99')} ms   TPOT p50 {_ms(tpot, 'median')}"
                f" ms   {_num(summary.get('steady_request_throughput_rps'))} req/s   "
                f"{_num(summary.get('steady_output_throughput_tps'), '.1f')} output tok/s")
    offered = summary.get("offered_rate_rps")
    if offered is not None:
        asked, error = summary.get("asked_rate_rps"), summary.get("offered_rate_error_pct")
        lines.append(f"rate        offered {offered:.2f} req/s" + (
            f", asked {asked:.2f} req/s ({error:+.1f}%)" if asked is not None and error is not None
            else ", no single rate asked"))
    return lines


def shown_stats(summary: dict[str, Any]) -> list[str]:
    """The columns of the latency table: the mean, the run's percentiles (report.percentiles,
    as its TTFT holds them) and the maximum."""
    held = [k for k in summary.get("ttft_s") or {} if k not in (*MOMENTS_BEFORE, *MOMENTS_AFTER)]
    return ["mean", *held, "max"]


def client_queue_line(summary: dict[str, Any]) -> str | None:
    """Under arrival.max_concurrency: the wait for a slot, apart from the engine's latency."""
    queue = summary.get("client_queue_s") or {}
    if queue.get("mean") is None:
        return None
    cap = (summary.get("scenario") or {}).get("arrival", {}).get("max_concurrency")
    return (f"client queue  at most {cap} in flight: waited mean {_ms(queue, 'mean')} ms, p50 "
            f"{_ms(queue, 'median')} ms, max {_ms(queue, 'max')} ms (inside TTFT and E2E)")


def stage_table(summary: dict[str, Any]) -> Table | None:
    """One row per stage of scenario.stages: its load, its rate offered, its key figures."""
    stages = summary.get("stages")
    if not stages:
        return None
    table = Table(title="stages", title_justify="left", show_edge=False)
    for column in ("stage", "load", "offered req/s", "completed", "TTFT p50 ms", "TTFT p99 ms",
                   "TPOT p50 ms", "output tok/s", ""):
        table.add_column(column, justify="left" if column in ("load", "") else "right")
    for st in stages:
        ttft, tpot = st.get("ttft_s") or {}, st.get("tpot_s") or {}
        note = "saturated: the run stopped" if st["saturated"] else ("" if st["ran"] else "not run")
        error = st.get("offered_rate_error_pct")
        offered = _num(st.get("offered_rate_rps")) + (f" ({error:+.1f}%)" if error is not None else "")
        table.add_row(str(st["stage"]), st["load"], offered,
                      f"{st.get('num_completed', 0)}/{st.get('num_requests', 0)}",
                      _ms(ttft, "median"), _ms(ttft, "p99"), _ms(tpot, "median"),
                      _num(st.get("output_throughput_tps"), ".1f"), note)
    return table


def print_summary(summary: dict[str, Any], run_dir: Path, console: Console) -> None:
    heading = (
        f"{summary['scenario']['name']} on {summary['engine']['name']} / {summary['model'].get('label') or summary['model']['name']}: "
        f"{summary['num_completed']}/{summary['num_requests']} completed in {summary['duration_s']:.2f} s"
    )
    figures = Table(title=heading, title_justify="left", show_edge=False)
    figures.add_column("latency (ms)")
    stats = shown_stats(summary)
    for key in stats:
        figures.add_column(STAT_LABELS.get(key, key), justify="right")
    for name in LATENCIES:
        figures.add_row(name.removesuffix("_s"), *(_ms(summary[name], k) for k in stats))
    console.print(figures)
    stages = stage_table(summary)
    if stages is not None:
        console.print(stages)
    console.print(
        f"throughput  {_num(summary['request_throughput_rps'])} req/s   "
        f"{_num(summary['output_throughput_tps'], '.1f')} output tok/s   "
        f"{_num(summary['total_throughput_tps'], '.1f')} total tok/s   "
        f"goodput {_num(summary['goodput_rps'])} req/s "
        f"(SLO met by {_num(summary['slo_attainment'], '.0%')})"
    )
    for line in steady_lines(summary):
        console.print(line, markup=False, highlight=False)
    for line in (client_queue_line(summary), client_line(summary)):
        if line:
            console.print(line, markup=False, highlight=False)
    warning = token_count_warning(summary.get("token_count_source"),
                                  summary.get("token_count_sources") or {})
    if warning:
        console.print(f"[yellow]warning:[/yellow] {warning}", highlight=False)
    verdict = "[green]valid[/green]" if summary["valid"] else "[red]not valid[/red]"
    failed = [c for c in summary["validity"] if not c["ok"]]
    failed_checks = "; ".join(c["detail"] for c in failed if c.get("blocking", True))
    console.print(f"{verdict}{': ' + failed_checks if failed_checks else ''}")
    for c in failed:
        if not c.get("blocking", True):
            console.print(f"warning: {c['check']}: {c['detail']}", markup=False, highlight=False)
    console.print(f"results in {run_dir}", markup=False, highlight=False)
