"""llmperf-serve's /metrics: prometheus_client metrics under vLLM's names.

The names, types and labels are vLLM's (vllm/v1/metrics/loggers.py), so the scraper's
vLLM mapping (llmperf/serverside/families.py) reads this server too. The buckets are
finer than vLLM's at the low end, where a CPU-sized model's latencies fall. Each server
has its own CollectorRegistry: two servers in one process do not share figures.
Updates happen on the server's event loop; engine counters are read at scrape time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from llmperf.serve.request_log import ServedRequest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# fmt: off
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                  7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0)
TPOT_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                  0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 80.0)
REQUEST_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0,
                     10.0, 15.0, 20.0, 30.0, 40.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0)
# fmt: on
FINISH_REASONS = ("stop", "length", "abort", "error")


@dataclass
class EngineLoad:
    """The engine's state at a scrape; the counters are totals since it started."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float | None  # fraction of KV blocks in use; None without a block cache
    num_preemptions: int = 0
    prefix_cache_query_tokens: int = 0
    prefix_cache_hit_tokens: int = 0


class _EngineCounters(Collector):
    """Counters the engine keeps itself, exported as they stand at each scrape."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.load = EngineLoad(0, 0, None)

    def collect(self) -> Iterator[CounterMetricFamily]:
        for name, doc, value in (
            ("vllm:num_preemptions", "Requests preempted (their KV blocks freed).", self.load.num_preemptions),
            ("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.",
             self.load.prefix_cache_query_tokens),
            ("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.", self.load.prefix_cache_hit_tokens),
        ):
            family = CounterMetricFamily(name, doc, labels=["model_name"])
            family.add_metric([self.model_name], value)
            yield family


class ServerMetrics:
    def __init__(self, model_name: str):
        self.registry = CollectorRegistry()
        self.num_in_flight = 0
        labels, r = ["model_name"], self.registry

        def histogram(name: str, doc: str, buckets: tuple[float, ...]):
            return Histogram(name, doc, labels, buckets=buckets, registry=r).labels(model_name)

        def gauge(name: str, doc: str):
            return Gauge(name, doc, labels, registry=r).labels(model_name)

        self.ttft = histogram("vllm:time_to_first_token_seconds", "Request arrival to its first token.", TTFT_BUCKETS_S)
        self.queue = histogram("vllm:request_queue_time_seconds", "Request arrival to its first scheduling.", REQUEST_BUCKETS_S)
        self.prefill = histogram("vllm:request_prefill_time_seconds", "First scheduling to first token.", REQUEST_BUCKETS_S)
        self.decode = histogram("vllm:request_decode_time_seconds", "First token to last token.", REQUEST_BUCKETS_S)
        self.e2e = histogram("vllm:e2e_request_latency_seconds", "Request arrival to its last token.", REQUEST_BUCKETS_S)
        self.tpot = histogram("vllm:request_time_per_output_token_seconds",
                              "Per request: (last - first token) / (tokens - 1).", TPOT_BUCKETS_S)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens of finished requests.", labels, registry=r).labels(model_name)
        self.generation_tokens = Counter("vllm:generation_tokens", "Tokens generated for finished requests.", labels,
                                         registry=r).labels(model_name)
        self.finished = Counter("vllm:request_success", "Finished requests by finish reason.",
                                [*labels, "finished_reason"], registry=r)
        for reason in FINISH_REASONS:  # present at zero from the start, as vLLM's are
            self.finished.labels(model_name, reason)
        self.model_name = model_name
        self.running = gauge("vllm:num_requests_running", "Requests in the engine's running batch.")
        self.waiting = gauge("vllm:num_requests_waiting", "Requests received and not yet running.")
        self.kv_cache_usage = gauge("vllm:kv_cache_usage_perc", "Fraction of KV cache blocks in use (0-1).")
        self._engine_counters = _EngineCounters(model_name)
        r.register(self._engine_counters)

    def on_finished(self, req: ServedRequest) -> None:
        self.prompt_tokens.inc(req.num_prompt_tokens)
        self.generation_tokens.inc(req.num_output_tokens)
        reason = req.finish_reason if req.finish_reason in FINISH_REASONS else "error"
        self.finished.labels(self.model_name, reason).inc()
        for hist, value in (
            (self.ttft, req.ttft_s),
            (self.queue, req.queue_s),
            (self.prefill, req.prefill_s),
            (self.decode, req.decode_s),
            (self.e2e, req.e2e_s),
            (self.tpot, req.tpot_s),
        ):
            if value is not None:
                hist.observe(value)

    def render(self, load: EngineLoad) -> bytes:
        """Prometheus text with the gauges and engine counters as `load` has them now."""
        self.running.set(load.num_running)
        self.waiting.set(load.num_waiting)
        # No block cache: 0 rather than absent, so the gauge's series has no holes.
        self.kv_cache_usage.set(load.kv_cache_usage or 0.0)
        self._engine_counters.load = load
        return generate_latest(self.registry)
