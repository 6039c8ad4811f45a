"""Server-side figures: per-request timings, Prometheus text for /metrics, a JSONL request log.

Every request the server answers becomes a `ServedRequest`: when it arrived,
when its first and last tokens were produced, how many tokens. Those feed the
/metrics histograms and, with `request_log=PATH`, one JSON line each, so a
client-side run (`llmperf engine=openai`) can be checked against the server.
All updates happen on the server's event loop, so no locks are needed.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

# Bucket upper bounds in seconds (vLLM's, with finer steps at the low end for CPU-sized models).
# fmt: off
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                  7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0)
TPOT_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                  0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 80.0)
E2E_BUCKETS_S = (0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                 40.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0)
# fmt: on
FINISH_REASONS = ("stop", "length", "abort", "error")


@dataclass
class ServedRequest:
    """One request as the server saw it. Times are perf_counter() seconds of the server process."""

    id: str
    endpoint: str
    arrival_s: float
    arrival_unix_s: float
    client_request_id: str | None = None  # the X-Request-Id header, to join with client records
    scheduled_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float | None:
        return None if self.last_token_s is None else self.last_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        if self.num_output_tokens < 2 or self.first_token_s is None:
            return None
        return (self.last_token_s - self.first_token_s) / (self.num_output_tokens - 1)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(ttft_s=self.ttft_s, e2e_s=self.e2e_s, tpot_s=self.tpot_s)
        d["queue_s"] = None if self.scheduled_s is None else self.scheduled_s - self.arrival_s
        return d


class Histogram:
    def __init__(self, buckets: tuple[float, ...]):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last slot is +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value
        self.count += 1

    def render(self, name: str, labels: str) -> list[str]:
        lines, cumulative = [], 0
        for bound, n in zip((*self.buckets, float("inf")), self.counts, strict=True):
            cumulative += n
            le = "+Inf" if bound == float("inf") else repr(bound)
            lines.append(f'{name}_bucket{{{labels},le="{le}"}} {cumulative}')
        lines.append(f"{name}_sum{{{labels}}} {self.sum!r}")
        lines.append(f"{name}_count{{{labels}}} {self.count}")
        return lines


@dataclass
class EngineLoad:
    num_running: int
    num_waiting: int
    kv_cache_usage: float | None  # fraction of KV blocks in use; None without a block cache


class ServerMetrics:
    def __init__(self, model_name: str):
        self.labels = f'model_name="{model_name}"'
        self.num_in_flight = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.finished = dict.fromkeys(FINISH_REASONS, 0)
        self.ttft = Histogram(TTFT_BUCKETS_S)
        self.tpot = Histogram(TPOT_BUCKETS_S)
        self.e2e = Histogram(E2E_BUCKETS_S)

    def on_finished(self, req: ServedRequest) -> None:
        self.prompt_tokens_total += req.num_prompt_tokens
        self.generation_tokens_total += req.num_output_tokens
        reason = req.finish_reason if req.finish_reason in self.finished else "error"
        self.finished[reason] += 1
        for hist, value in (
            (self.ttft, req.ttft_s),
            (self.tpot, req.tpot_s),
            (self.e2e, req.e2e_s),
        ):
            if value is not None:
                hist.observe(value)

    def render(self, load: EngineLoad) -> str:
        p, labels = "llmperf_", self.labels
        out: list[str] = []

        def metric(name: str, kind: str, help_text: str, lines: list[str]) -> None:
            out.extend([f"# HELP {p}{name} {help_text}", f"# TYPE {p}{name} {kind}", *lines])

        metric(
            "num_requests_running",
            "gauge",
            "Requests in the engine's running batch.",
            [f"{p}num_requests_running{{{labels}}} {load.num_running}"],
        )
        metric(
            "num_requests_waiting",
            "gauge",
            "Requests received and not yet running.",
            [f"{p}num_requests_waiting{{{labels}}} {load.num_waiting}"],
        )
        if load.kv_cache_usage is not None:
            metric(
                "kv_cache_usage_ratio",
                "gauge",
                "Fraction of KV cache blocks in use (0-1).",
                [f"{p}kv_cache_usage_ratio{{{labels}}} {load.kv_cache_usage!r}"],
            )
        metric(
            "prompt_tokens_total",
            "counter",
            "Prompt tokens of finished requests.",
            [f"{p}prompt_tokens_total{{{labels}}} {self.prompt_tokens_total}"],
        )
        metric(
            "generation_tokens_total",
            "counter",
            "Tokens generated for finished requests.",
            [f"{p}generation_tokens_total{{{labels}}} {self.generation_tokens_total}"],
        )
        metric(
            "request_success_total",
            "counter",
            "Finished requests by finish reason.",
            [
                f'{p}request_success_total{{{labels},finish_reason="{r}"}} {n}'
                for r, n in self.finished.items()
            ],
        )
        metric(
            "time_to_first_token_seconds",
            "histogram",
            "Request arrival to its first token.",
            self.ttft.render(f"{p}time_to_first_token_seconds", labels),
        )
        metric(
            "time_per_output_token_seconds",
            "histogram",
            "Per request: (last - first token) / (tokens - 1).",
            self.tpot.render(f"{p}time_per_output_token_seconds", labels),
        )
        metric(
            "e2e_request_latency_seconds",
            "histogram",
            "Request arrival to its last token.",
            self.e2e.render(f"{p}e2e_request_latency_seconds", labels),
        )
        return "\n".join(out) + "\n"


class RequestLog:
    """Appends one JSON line per finished request, flushed, so a killed server keeps what it logged."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO = self.path.open("a", encoding="utf-8")

    def write(self, req: ServedRequest) -> None:
        self._file.write(json.dumps(req.to_dict()) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()
