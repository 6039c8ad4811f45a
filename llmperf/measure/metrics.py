"""The run's figures, computed from its request records by one pure function.

Definitions (vLLM `bench serve`, except that latencies start at the intended arrival):
  TTFT      first token received - intended arrival
  E2E       last token received - intended arrival
  TPOT      (E2E - TTFT) / (output_tokens - 1), per request, only when output_tokens > 1
  ITL       gaps between consecutive token (or chunk) arrivals, pooled over requests: per
            chunk, as vLLM's `bench serve` reports it
  ITL per token  each such gap divided by the tokens of the chunk it ends, once per token,
            so a chunk of n tokens is not read as one slow token
  queue     engine admission - intended arrival, when the engine reports admission
  dispatch lag  handed to the engine - intended arrival - client queue (the load
            generator's own delay)
  client queue  intended arrival to a slot's release, under arrival.max_concurrency
  TTFT (answer) first answer token received - intended arrival; TTFT counts a token of any
                kind, so with reasoning output the two differ by the thinking time
  reasoning / answer tokens  output tokens streamed as reasoning content / the rest
  pool wait     handed to the HTTP client - started on a connection of its pool
n choices (OpenAI's `n`) stream side by side: ITL is taken within each choice, TPOT over the
longest choice, output tokens count them all. A whole response (stream: false) or an
embedding has no token times: no TTFT, TPOT or ITL (and no TTFT target to miss).
Latencies use completed measured requests; dispatch lag and pool wait every measured request.
The measured window runs from the first measured arrival to the last measured end;
throughputs and goodput divide by its length.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any

import numpy as np

from engines.base import TOKEN_COUNT_SOURCES
from llmperf.measure.catalog import DEFAULT_PERCENTILES, stat_keys
from llmperf.measure.prefix_reuse import expected_hit_rate
from llmperf.measure.records import RequestRecord
from llmperf.workload.scenario import SloConfig

# The percentiles every distribution of this run carries (`report.percentiles`); the runner
# sets them for the run, so each figure's code computes them without passing them along.
PERCENTILES: ContextVar[tuple[float, ...]] = ContextVar("percentiles", default=DEFAULT_PERCENTILES)


@contextlib.contextmanager
def percentiles_in_use(percentiles: Sequence[float]) -> Iterator[None]:
    """Within the block, `distribution` gives these percentiles."""
    token = PERCENTILES.set(tuple(sorted(set(float(q) for q in percentiles))))
    try:
        yield
    finally:
        PERCENTILES.reset(token)


def distribution(values: Sequence[float]) -> dict[str, float | None]:
    """Mean, the percentiles in use (linear interpolation; by default median, p90, p95, p99),
    std (population), min, max."""
    percentiles = PERCENTILES.get()
    keys = stat_keys(percentiles)
    if len(values) == 0:
        return dict.fromkeys(keys)
    a = np.asarray(values, dtype=float)
    stats = (a.mean(), *np.percentile(a, percentiles), a.std(), a.min(), a.max())
    return {k: float(v) for k, v in zip(keys, stats, strict=True)}


def ttft_s(r: RequestRecord) -> float | None:
    return None if r.first_token_s is None else r.first_token_s - r.arrival_s


def ttft_answer_s(r: RequestRecord) -> float | None:
    return None if r.first_answer_token_s is None else r.first_answer_token_s - r.arrival_s


def dispatch_lag_s(r: RequestRecord) -> float:
    """Handed to the engine − the later of the intended arrival and the slot's release under
    a concurrency cap: the client's own delay, not the cap's deliberate wait."""
    return r.dispatch_s - r.arrival_s - r.client_queue_s


def e2e_s(r: RequestRecord) -> float:
    return r.end_s - r.arrival_s


def choice_streams(r: RequestRecord) -> list[tuple[list[float], list[int]]]:
    """Each choice's token times and the tokens of each of those events, choice by choice."""
    tokens = r.chunk_tokens or [1] * len(r.token_times_s)
    if r.token_choices is None:
        return [(r.token_times_s, tokens)]
    streams: dict[int, tuple[list[float], list[int]]] = {}
    for t, n, c in zip(r.token_times_s, tokens, r.token_choices, strict=True):
        times, counts = streams.setdefault(c, ([], []))
        times.append(t)
        counts.append(n)
    return [streams[c] for c in sorted(streams)]


def tpot_s(r: RequestRecord) -> float | None:
    """With several choices, decode time per token of the longest one (they decode side by side)."""
    ttft = ttft_s(r)
    tokens = r.output_tokens
    if r.token_choices is not None:
        tokens = max(sum(counts) for _, counts in choice_streams(r))
    if tokens < 2 or ttft is None:
        return None
    return (e2e_s(r) - ttft) / (tokens - 1)


def itl_s(r: RequestRecord) -> list[float]:
    return [g for times, _ in choice_streams(r) for g in np.diff(times).tolist()]


def itl_per_token_s(r: RequestRecord) -> list[float]:
    return [g / n for times, counts in choice_streams(r)
            for g, n in zip(np.diff(times).tolist(), counts[1:], strict=True) for _ in range(n)]


def meets_slo(r: RequestRecord, slo: SloConfig) -> bool:
    """A completed request meets the SLO when it meets each target that is set.

    A one-token output has no TPOT, so it cannot miss a TPOT target; a whole response or an
    embedding has no TTFT, so it cannot miss a TTFT target.
    """
    if not r.ok:
        return False
    ttft, tpot = ttft_s(r), tpot_s(r)
    streamed = r.response == "stream"
    return not (
        (slo.ttft_s is not None and streamed and (ttft is None or ttft > slo.ttft_s))
        or (slo.tpot_s is not None and tpot is not None and tpot > slo.tpot_s)
        or (slo.e2e_s is not None and e2e_s(r) > slo.e2e_s)
    )


def session_metrics(records: Iterable[RequestRecord], block_tokens: int) -> dict[str, Any]:
    """Figures of multi-turn and shared-prefix workloads (absent from other runs).

    `ttft_s_by_turn`: TTFT's distribution per turn index ("0", "1", ...), completed measured
    requests. `prefix_cache_hit_rate_expected`: see llmperf/measure/prefix_reuse.py.
    """
    measured = [r for r in records if not r.warmup]
    out: dict[str, Any] = {}
    if any(r.session_id is not None for r in measured):
        by_turn: dict[int, list[float]] = {}
        for r in measured:
            if r.ok and (t := ttft_s(r)) is not None:
                by_turn.setdefault(r.turn, []).append(t)
        out["num_sessions"] = len({r.session_id for r in measured})
        out["ttft_s_by_turn"] = {str(k): distribution(v) for k, v in sorted(by_turn.items())}
    if any(r.shared_prefix_tokens for r in measured):
        out["prefix_cache_hit_rate_expected"] = expected_hit_rate(measured, block_tokens)
    return out


def token_count_sources(completed: Iterable[RequestRecord]) -> dict[str, int]:
    """How many completed requests had their tokens counted each way, best source first."""
    counts = Counter(r.token_count_source for r in completed if r.token_count_source)
    return {source: counts[source] for source in TOKEN_COUNT_SOURCES if counts[source]}


def least_exact(sources: dict[str, int]) -> str | None:
    """The source that bounds the counts' exactness: the worst one any request used."""
    return max(sources, key=TOKEN_COUNT_SOURCES.index, default=None)


def token_count_mismatches(records: Iterable[RequestRecord]) -> dict[str, int]:
    """Completed measured requests whose token-carrying chunks outnumber the output tokens the
    server's usage reports: a chunk that carried no token was counted as one (an end marker,
    a keep-alive), so the stream's token times, ITL and TPOT are off. Fewer chunks than tokens
    is a server that sends several tokens a chunk, which is allowed."""
    n = sum(1 for r in records if not r.warmup and r.ok and r.token_count_source == "server usage"
            and len(r.token_times_s) > r.output_tokens)
    return {"num_token_count_mismatches": n}


def token_count_warning(source: str | None, sources: dict[str, int]) -> str | None:
    """One line to show wherever token figures are shown, when they are bytes, not tokens."""
    if source != "bytes":
        return None
    return (f"token counts of {sources.get('bytes', '?')} requests are UTF-8 bytes, not the"
            " model's tokens (no tokenizer, and no usage from the server): tokens/s and cost per"
            " token are per byte; give engine.tokenizer=PATH to the model's tokenizer.json")


def compute_metrics(records: Iterable[RequestRecord], slo: SloConfig,
                    capped: bool = False) -> dict[str, Any]:
    """summary.json's figures from the records; warmup records are left out. `capped`: the
    scenario set arrival.max_concurrency, so client_queue_s is measured (else null)."""
    records = list(records)
    measured = [r for r in records if not r.warmup]
    completed = [r for r in measured if r.ok]
    warmup = [r for r in records if r.warmup]
    if measured:
        window_start_s = min(r.arrival_s for r in measured)
        window_end_s = max(r.end_s for r in measured)
    else:
        window_start_s = window_end_s = None
    duration_s = (window_end_s - window_start_s) if measured else 0.0
    input_total = sum(r.input_tokens for r in completed)
    output_total = sum(r.output_tokens for r in completed)
    reasoning_total = sum(r.reasoning_tokens for r in completed)
    num_good = sum(meets_slo(r, slo) for r in completed)
    sources = token_count_sources(completed)

    def per_second(count: float) -> float | None:
        return count / duration_s if duration_s > 0 else None

    return {
        "num_requests": len(measured),
        "num_completed": len(completed),
        "num_failed": len(measured) - len(completed),
        "num_warmup": len(warmup),
        "num_warmup_completed": sum(r.ok for r in warmup),
        "window_start_s": window_start_s,
        "window_end_s": window_end_s,
        "duration_s": duration_s,
        "request_throughput_rps": per_second(len(completed)),
        "output_throughput_tps": per_second(output_total),
        "total_throughput_tps": per_second(input_total + output_total),
        "input_tokens_total": input_total,
        "output_tokens_total": output_total,
        "reasoning_tokens_total": reasoning_total,
        "answer_tokens_total": output_total - reasoning_total,
        "token_count_source": least_exact(sources),
        "token_count_sources": sources,
        "ttft_s": distribution([t for r in completed if (t := ttft_s(r)) is not None]),
        "ttft_answer_s": distribution(
            [t for r in completed if (t := ttft_answer_s(r)) is not None]
        ),
        "tpot_s": distribution([t for r in completed if (t := tpot_s(r)) is not None]),
        "itl_s": distribution([g for r in completed for g in itl_s(r)]),
        "itl_per_token_s": distribution([g for r in completed for g in itl_per_token_s(r)]),
        "e2e_s": distribution([e2e_s(r) for r in completed]),
        "queue_s": distribution(
            [r.admitted_s - r.arrival_s for r in completed if r.admitted_s is not None]
        ),
        "dispatch_lag_s": distribution([dispatch_lag_s(r) for r in measured]),
        "client_queue_s": (distribution([r.client_queue_s for r in measured])
                           if capped else dict.fromkeys(stat_keys(PERCENTILES.get()))),
        "pool_wait_s": distribution([r.pool_wait_s for r in measured if r.pool_wait_s is not None]),
        "client_send_s": distribution(
            [r.written_s - r.arrival_s for r in measured if r.written_s is not None]
        ),
        "headers_wait_s": distribution(
            [r.headers_s - r.written_s for r in measured
             if r.response == "stream" and r.headers_s is not None and r.written_s is not None]
        ),
        "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s, "e2e_s": slo.e2e_s},
        "num_slo_met": num_good,
        "goodput_rps": per_second(num_good),
        "slo_attainment": num_good / len(measured) if measured else None,
    }
