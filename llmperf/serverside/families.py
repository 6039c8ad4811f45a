"""Which server metric holds which figure, per server family: the one table of names.

A family is recognised by its metric prefix. llmperf-serve exports vLLM's names (see
llmperf/serve/prometheus_metrics.py), so the vLLM row serves both. Names were checked
against vLLM 0.32 (vllm/v1/metrics/loggers.py), SGLang's metrics collector
(python/sglang/srt/metrics/collector.py), TGI's metrics reference and llama.cpp's
server `--metrics` output; docs/server-metrics.md lists them with what each lacks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

HISTOGRAM, COUNTER, GAUGE = "histogram", "counter", "gauge"

# Our figures and what they are (docs/server-metrics.md says the same).
FIGURES: dict[str, tuple[str, str]] = {
    "ttft_s": (HISTOGRAM, "request arrival at the server to its first token"),
    "queue_s": (HISTOGRAM, "waiting for the scheduler, before the first step that runs it"),
    "prefill_s": (HISTOGRAM, "first scheduled to first token"),
    "decode_s": (HISTOGRAM, "first token to last token"),
    "e2e_s": (HISTOGRAM, "request arrival at the server to its last token"),
    "tpot_s": (HISTOGRAM, "per request: decode time / (output tokens - 1)"),
    "output_tokens": (COUNTER, "tokens generated"),
    "prompt_tokens": (COUNTER, "prompt tokens processed"),
    "preemptions": (COUNTER, "requests preempted (vLLM) or retracted (SGLang)"),
    "prefix_cache_queries": (COUNTER, "prompt tokens looked up in the prefix cache"),
    "prefix_cache_hits": (COUNTER, "of those, tokens found"),
    "spec_decode_drafts": (COUNTER, "speculative decoding: drafts proposed"),
    "spec_decode_draft_tokens": (COUNTER, "speculative decoding: draft tokens proposed"),
    "spec_decode_accepted_tokens": (COUNTER, "speculative decoding: draft tokens accepted"),
    "kv_cache_usage": (GAUGE, "fraction of the KV cache in use, 0-1"),
    "running": (GAUGE, "requests in the running batch"),
    "waiting": (GAUGE, "requests waiting to be scheduled"),
}


@dataclass(frozen=True)
class Family:
    name: str
    prefix: str  # every metric of the family starts with it
    metrics: dict[str, str] = field(default_factory=dict)  # our figure -> the server's metric
    note: str = ""  # what the family's metrics cannot give, said where its figures are missing

    def figure_of(self, metric: str) -> str | None:
        return self._by_metric.get(metric)

    @cached_property
    def _by_metric(self) -> dict[str, str]:
        return {m: figure for figure, m in self.metrics.items()}


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("vllm", "vllm:", {
            "ttft_s": "vllm:time_to_first_token_seconds",
            "queue_s": "vllm:request_queue_time_seconds",
            "prefill_s": "vllm:request_prefill_time_seconds",
            "decode_s": "vllm:request_decode_time_seconds",
            "e2e_s": "vllm:e2e_request_latency_seconds",
            "tpot_s": "vllm:request_time_per_output_token_seconds",
            "output_tokens": "vllm:generation_tokens",
            "prompt_tokens": "vllm:prompt_tokens",
            "preemptions": "vllm:num_preemptions",
            "prefix_cache_queries": "vllm:prefix_cache_queries",
            "prefix_cache_hits": "vllm:prefix_cache_hits",
            "spec_decode_drafts": "vllm:spec_decode_num_drafts",
            "spec_decode_draft_tokens": "vllm:spec_decode_num_draft_tokens",
            "spec_decode_accepted_tokens": "vllm:spec_decode_num_accepted_tokens",
            "kv_cache_usage": "vllm:kv_cache_usage_perc",  # a 0-1 fraction despite the name
            "running": "vllm:num_requests_running",
            "waiting": "vllm:num_requests_waiting",
        }),
        # No prefill or decode histograms, and the prefix cache only as a hit-rate gauge.
        Family("sglang", "sglang:", {
            "ttft_s": "sglang:time_to_first_token_seconds",
            "queue_s": "sglang:queue_time_seconds",
            "e2e_s": "sglang:e2e_request_latency_seconds",
            "tpot_s": "sglang:time_per_output_token_seconds",
            "output_tokens": "sglang:generation_tokens",
            "prompt_tokens": "sglang:prompt_tokens",
            "preemptions": "sglang:num_retracted_requests",
            "kv_cache_usage": "sglang:token_usage",
            "running": "sglang:num_running_reqs",
            "waiting": "sglang:num_queue_reqs",
        }),
        # No TTFT: TGI times inference per request, not to its first token.
        Family("tgi", "tgi_", {
            "queue_s": "tgi_request_queue_duration",
            "e2e_s": "tgi_request_duration",
            "tpot_s": "tgi_request_mean_time_per_token_duration",
            "running": "tgi_batch_current_size",
            "waiting": "tgi_queue_size",
        }),
        # Counters and gauges only (`llama-server --metrics`, checked against a live server
        # built by scripts/install-llama-cpp.sh). prompt_tokens excludes the tokens a slot
        # reused from its cache; those (prompt_tokens_cached) are left unmapped, as their
        # token-by-token hits (a shared BOS) would read as a stale prefix cache. No KV-cache
        # gauge (kv_cache_usage_ratio is gone) and no per-request latency.
        Family("llama.cpp", "llamacpp:", {
            "output_tokens": "llamacpp:tokens_predicted",
            "prompt_tokens": "llamacpp:prompt_tokens",
            "spec_decode_drafts": "llamacpp:spec_decode_num_drafts",
            "spec_decode_draft_tokens": "llamacpp:spec_decode_num_draft_tokens",
            "spec_decode_accepted_tokens": "llamacpp:spec_decode_num_accepted_tokens",
            "running": "llamacpp:requests_processing",
            "waiting": "llamacpp:requests_deferred",
        }, note="llama.cpp's /metrics has counters and gauges only, no per-request "
                "histogram: no server TTFT, queue, prefill, decode or E2E, so no "
                "client-vs-server split (docs/llama-cpp.md)"),
    )
}


def detect_family(metric_names: set[str]) -> Family | None:
    """The family with the most of its metrics among `metric_names`; None when none match."""
    best = max(FAMILIES.values(), key=lambda f: len(metric_names & set(f.metrics.values())))
    return best if metric_names & set(best.metrics.values()) else None
