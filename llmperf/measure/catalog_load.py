"""The catalog's entries for the load's figures: request latency, throughput and counts,
sessions, what the client cost, the steady window and the offered rate, and the
server's own figures from its /metrics (llmperf/measure/catalog.py gathers them)."""

from __future__ import annotations

from llmperf.measure.catalog_base import (
    HIGHER,
    LOWER,
    NEITHER,
    PREFIX_HITS,
    REQUEST_FIGURES,
    SESSIONS,
    Metric,
    _m,
)

CLIENT = "llmperf/measure/client_cpu.py:client_summary"


def _client_figures() -> list[Metric]:
    """What the load generator cost and whether it sent on time (llmperf/measure/client_cpu.py)."""
    c = "client"
    return [
        _m("client_cpu_s", "client CPU", "s", LOWER, "CPU time (user + system) of every"
           " load-generator process over the measured phase, all their threads: the event loop,"
           " the telemetry sampler, the /metrics scraper, the progress display", CLIENT, c),
        _m("client_cpu_per_request_s", "client CPU per request", "s", LOWER, "`client_cpu_s` /"
           " measured requests: what one request costs the client", CLIENT, c),
        _m("client_cpu_share", "client event-loop CPU share", "fraction", LOWER, "the busiest"
           " load generator's event-loop thread: its CPU time less its idle spin"
           " (`client_spin_share`) / the measured window. asyncio runs on that one thread, so"
           " near 1 the client's own work is the limit", CLIENT, c),
        _m("client_spin_share", "client event-loop idle spin", "fraction", NEITHER, "of that"
           " loop's CPU time, the turns it spun before a send with nothing else to run (each"
           " under 10 µs) / the measured window: CPU any work would have taken over; most of the"
           " loop's when requests come under 1 ms apart (it spins the last 1 ms before each)",
           CLIENT, c),
        _m("client_process_cpu_share", "client CPU, cores", "fraction", LOWER, "`client_cpu_s` /"
           " the measured window: the cores the client used in all (over 1 with workers)",
           CLIENT, c),
        _m("client_runqueue_wait_share", "client run-queue wait", "fraction", LOWER, "the"
           " busiest wait of a load generator's event-loop thread for a core while runnable"
           " (`/proc/thread-self/schedstat`) / the measured window: high while its own CPU is low"
           " means another process held the cores; null where schedstat cannot be read",
           CLIENT, c),
        _m("client_stall_share", "client stalls", "fraction", LOWER, "a lower bound on the"
           " time the load generators' loops stood still / the measured window: each worker's"
           " late requests (client delay past `max_client_delay_s`) in runs of consecutive ones,"
           " each run counted by its longest delay", CLIENT, c),
        _m("client_runqueue_wait_total_share", "client run-queue wait, all loops", "fraction",
           LOWER, "every load generator's event-loop thread's wait for a core while runnable,"
           " summed / the measured window: under half of `client_stall_share`, no other process"
           " held the cores while the loops stood still", CLIENT, c),
        _m("client_gc_pause_share", "client GC pauses", "fraction", LOWER, "the most any"
           " process that sends requests spent in Python's garbage collections (gc.callbacks)"
           " over the measured phase / its window: each collection stops that process's event"
           " loop", CLIENT, c),
        _m("client_gc_max_pause_s", "client longest GC pause", "s", LOWER, "the longest"
           " garbage collection in any process that sends requests, over the measured phase: a"
           " send due during it waits that long; past `max_client_delay_s` the verdict names"
           " the collector", CLIENT, c),
        _m("client_delay_s", "client delay", "s", LOWER, "the request's last byte written (HTTP;"
           " else its hand-off to the engine) − intended arrival, less the time a new connection"
           " took to open: how late the client sent it", CLIENT, c, distribution=True),
        _m("client_late_fraction", "late requests", "fraction", LOWER, "measured requests whose"
           " `client_delay_s` passed `scenario.validity.max_client_delay_s` / measured requests",
           CLIENT, c),
        _m("client_pool_late_fraction", "requests late for a connection", "fraction", LOWER,
           "measured requests whose `pool_wait_s` passed `scenario.validity.max_client_delay_s`"
           " / measured requests", CLIENT, c),
        _m("client_max_in_flight", "most requests in flight", "requests", NEITHER, "the most"
           " measured requests dispatched and not yet ended at once (beside"
           " `engine.max_connections`, whether the pool could be exhausted)", CLIENT, c),
        _m("event_loop_late_fraction", "late event-loop wake-ups", "fraction", LOWER, "event-loop"
           " lag probes (`event_loop_lag_s`) past `scenario.validity.max_client_delay_s` /"
           " probes: a late loop delays sends and stamps receipts late alike", CLIENT, c),
        _m("event_loop_late_probes", "late event-loop wake-ups, count", "samples", LOWER, "the"
           " probes counted in `event_loop_late_fraction`; the verdict weighs that share from"
           " 3 late probes on", CLIENT, c),
    ]


STEADY = "llmperf/measure/steady.py:steady_metrics"
OFFERED = "llmperf/measure/steady.py:offered_rate_metrics"


def _steady_figures() -> list[Metric]:
    """The steady window's figures beside the whole run's, and the rate delivered beside the
    rate asked (llmperf/measure/steady.py: how the plateau is found)."""
    st, off = "steady", "offered"
    window = " over the requests dispatched inside the steady window"
    per_window = " ÷ `steady_duration_s`"
    return [
        _m("steady_window_start_s", "steady window start", "s", NEITHER, "when the in-flight"
           " count (measured requests dispatched and not yet ended) first reached its plateau:"
           " a closed loop's concurrency, an open loop's time-weighted median in-flight count"
           " over its dispatch span (at least 1); seconds from the start of the run", STEADY, st),
        _m("steady_window_end_s", "steady window end", "s", NEITHER, "the last measured"
           " dispatch: the tail after it drains with fewer requests in flight", STEADY, st),
        _m("steady_duration_s", "steady window", "s", NEITHER, "`steady_window_end_s` −"
           " `steady_window_start_s`", STEADY, st),
        _m("steady_in_flight", "steady in flight", "requests", NEITHER, "the plateau: the"
           " in-flight level the steady window starts at", STEADY, st),
        _m("steady_num_requests", "steady requests", "requests", NEITHER, "measured requests"
           " dispatched after the window's start, up to its end inclusive; fewer than 2 (or"
           " fewer than 2 completed) leave the steady figures null, `steady_window_reason` says"
           " why", STEADY, st),
        _m("steady_num_completed", "steady requests completed", "requests", NEITHER,
           "`steady_num_requests` that completed", STEADY, st),
        _m("steady_ttft_s", "steady TTFT", "s", LOWER, "`ttft_s`" + window, STEADY, st,
           distribution=True),
        _m("steady_tpot_s", "steady TPOT", "s", LOWER, "`tpot_s`" + window, STEADY, st,
           distribution=True),
        _m("steady_itl_s", "steady ITL", "s", LOWER, "`itl_s`" + window, STEADY, st,
           distribution=True),
        _m("steady_e2e_s", "steady E2E", "s", LOWER, "`e2e_s`" + window, STEADY, st,
           distribution=True),
        _m("steady_request_throughput_rps", "steady request throughput", "req/s", HIGHER,
           "completed requests of the steady window" + per_window, STEADY, st),
        _m("steady_output_throughput_tps", "steady output throughput", "tok/s", HIGHER,
           "output tokens of the steady window's completed requests" + per_window, STEADY, st),
        _m("steady_total_throughput_tps", "steady total throughput", "tok/s", HIGHER,
           "(input + output tokens) of the steady window's completed requests" + per_window,
           STEADY, st),
        _m("steady_goodput_rps", "steady goodput", "req/s", HIGHER, "the steady window's"
           " completed requests that meet every SLO target set" + per_window, STEADY, st),
        _m("asked_rate_rps", "rate asked", "req/s", NEITHER, "`scenario.arrival.rate_rps` of a"
           " constant, poisson or gamma process; null for a closed loop, a ramp, a trace,"
           " offline and sessions", OFFERED, off),
        _m("offered_rate_rps", "rate offered", "req/s", NEITHER, "what the load generator"
           " delivered: (measured dispatches − 1) ÷ the span from the first to the last"
           " measured dispatch; closed loops too", OFFERED, off),
        _m("scheduled_rate_rps", "rate scheduled", "req/s", NEITHER, "the same over the"
           " intended arrivals: the rate the schedule itself drew (a short Poisson schedule"
           " misses the asked rate by chance); null for a closed loop", OFFERED, off),
        _m("offered_rate_error_pct", "offered rate error", "%", NEITHER, "(`offered_rate_rps`"
           " ÷ `asked_rate_rps` − 1) × 100; past ±5 the `offered_rate_held` warning", OFFERED,
           off),
    ]


def load_figures() -> list[Metric]:
    lat, thr, cnt = "latency", "throughput", "counts"
    metrics = [
        _m("ttft_s", "TTFT", "s", LOWER, "first token received − **intended** arrival. A late"
           " dispatcher or a queue in the engine shows up here, not hidden", REQUEST_FIGURES,
           lat, distribution=True),
        _m("tpot_s", "TPOT", "s", LOWER, "per request, (E2E − TTFT) / (output_tokens − 1), only"
           " for requests with more than one output token", REQUEST_FIGURES, lat,
           distribution=True),
        _m("itl_s", "ITL", "s", LOWER, "gaps between consecutive token arrivals (chunk arrivals,"
           " for engines that stream chunks), pooled over all requests: **per chunk**, which is"
           " what vLLM's `bench serve` reports as ITL", REQUEST_FIGURES, lat,
           distribution=True),
        _m("e2e_s", "E2E", "s", LOWER, "last token received − intended arrival",
           REQUEST_FIGURES, lat, distribution=True),
        _m("queue_s", "queue", "s", LOWER, "engine admission − intended arrival: how long the"
           " request waited before the engine first scheduled it (including dispatch lag). Only"
           " for engines that put `scheduled_s` on a request's first event (the reference and"
           " synthetic engines); null otherwise", REQUEST_FIGURES, lat, distribution=True),
        _m("dispatch_lag_s", "dispatch lag", "s", LOWER, "handed to the engine − intended"
           " arrival, less its client queue time: the load generator's own delay. Near 0 in a"
           " healthy run (under 2 ms at 200 req/s); a large value means the client, not the"
           " engine, was the bottleneck", REQUEST_FIGURES, lat, distribution=True),
        _m("client_queue_s", "client queue", "s", LOWER, "how long a measured request waited"
           " for a slot under `scenario.arrival.max_concurrency`: from its intended arrival to"
           " the end of the request in flight that freed one (0 when a slot was free); part of"
           " its TTFT and E2E, which count from the intended arrival. Null without a cap",
           REQUEST_FIGURES, "latency_detail", distribution=True),
        _m("itl_per_token_s", "ITL per token", "s", LOWER, "each ITL gap divided by the"
           " number of tokens in the chunk it ends, counted once per token: a chunk of n tokens"
           " (speculative decoding, a server's stream interval) reads as n tokens, not one slow"
           " one. Equal to `itl_s` when every chunk holds one token", REQUEST_FIGURES,
           "latency_detail", distribution=True),
        _m("ttft_answer_s", "TTFT (answer)", "s", LOWER, "first **answer** token received −"
           " intended arrival; TTFT counts a token of any kind, so with a reasoning model the"
           " two differ by the thinking time", REQUEST_FIGURES, "latency_detail",
           distribution=True),
        _m("event_loop_lag_s", "event-loop lag", "s", LOWER, "how late the load generator's"
           " event loop wakes a 10 ms sleeper, probed throughout the measured phase: a busy"
           " client delays sends and stamps receipts late alike",
           "llmperf/run/runner.py:summarize", "latency_detail", distribution=True),
        _m("pool_wait_s", "connection-pool wait", "s", LOWER, "handed to the HTTP client −"
           " started on a connection of its pool (opening one, or writing on a kept-alive one),"
           " every measured request of an HTTP engine: the queue the client adds when"
           " `engine.max_connections` is below the requests in flight; null for in-process"
           " engines", REQUEST_FIGURES, "latency_detail", distribution=True),
        _m("client_send_s", "client send", "s", LOWER, "the request's last byte written −"
           " intended arrival, every measured request of an HTTP engine: the client's own part of"
           " a request (dispatch lag, the hand-off to the HTTP thread, the connection-pool wait,"
           " building and writing the request), timed on each request; null for in-process"
           " engines", REQUEST_FIGURES, "latency_detail", distribution=True),
        _m("headers_wait_s", "time to response headers", "s", LOWER, "response headers"
           " received − request written, streamed responses of an HTTP engine: the network both"
           " ways and the server's work before it starts its answer (parsing, validation,"
           " templating, tokenization; vLLM sends its headers before the request reaches its"
           " engine). A server that holds its headers until the first token reads near TTFT",
           REQUEST_FIGURES, "latency_detail", distribution=True),
        *_client_figures(),
        _m("num_token_count_mismatches", "token count mismatches", "requests", LOWER,
           "completed measured requests whose token-carrying chunks outnumber the output tokens"
           " of the server's usage: a chunk without a token was counted as one (the run warns)",
           "llmperf/measure/metrics.py:token_count_mismatches", "counts"),
        _m("output_throughput_tps", "output throughput", "tok/s", HIGHER,
           "output tokens of completed requests / `duration_s`", REQUEST_FIGURES, thr),
        _m("total_throughput_tps", "total throughput", "tok/s", HIGHER,
           "(input + output tokens of completed requests) / `duration_s`", REQUEST_FIGURES, thr),
        _m("request_throughput_rps", "request throughput", "req/s", HIGHER,
           "completed requests / `duration_s`", REQUEST_FIGURES, thr),
        _m("goodput_rps", "goodput", "req/s", HIGHER, "completed requests that meet every SLO"
           " target set (TTFT, TPOT, E2E) / `duration_s`", REQUEST_FIGURES, thr),
        _m("slo_attainment", "SLO attainment", "fraction", HIGHER, "requests that meet every"
           " SLO target / measured requests (failed requests count as misses)",
           REQUEST_FIGURES, thr),
        _m("duration_s", "measured duration", "s", LOWER, "the measured window: first measured"
           " intended arrival to last measured end (warmup excluded)", REQUEST_FIGURES, thr),
        _m("window_start_s", "window start", "s", NEITHER, "the first measured request's"
           " intended arrival, seconds from the start of the run", REQUEST_FIGURES, "window"),
        _m("window_end_s", "window end", "s", NEITHER, "the last measured request's end",
           REQUEST_FIGURES, "window"),
        _m("num_requests", "requests measured", "requests", NEITHER,
           "measured requests sent (warmup excluded)", REQUEST_FIGURES, cnt),
        _m("num_completed", "requests completed", "requests", HIGHER, "measured requests that"
           " ended with at least one output token and no error", REQUEST_FIGURES, cnt),
        _m("num_failed", "requests failed", "requests", LOWER, "measured requests that failed:"
           " an engine error, an abort, or no output token at all (`empty output`)",
           REQUEST_FIGURES, cnt),
        _m("num_slo_met", "requests meeting the SLO", "requests", HIGHER,
           "completed requests that meet every SLO target set", REQUEST_FIGURES, cnt),
        _m("num_warmup", "warmup requests", "requests", NEITHER,
           "requests sent and awaited before the measured window", REQUEST_FIGURES, cnt),
        _m("num_warmup_completed", "warmup requests completed", "requests", NEITHER,
           "warmup requests that completed", REQUEST_FIGURES, cnt),
        _m("input_tokens_total", "input tokens", "tokens", NEITHER,
           "prompt tokens of completed requests", REQUEST_FIGURES, cnt),
        _m("output_tokens_total", "output tokens", "tokens", NEITHER,
           "output tokens of completed requests", REQUEST_FIGURES, cnt),
        _m("reasoning_tokens_total", "reasoning tokens", "tokens", NEITHER, "output tokens of"
           " completed requests streamed as reasoning content (`reasoning_content` or"
           " `reasoning` chat deltas; the synthetic engine's `reasoning_tokens`)",
           REQUEST_FIGURES, cnt),
        _m("answer_tokens_total", "answer tokens", "tokens", NEITHER,
           "output tokens of completed requests that are not reasoning", REQUEST_FIGURES, cnt),
        _m("num_sessions", "sessions", "sessions", NEITHER, "multi-turn runs: sessions measured",
           SESSIONS, "sessions"),
        _m("prefix_cache_hit_rate_expected", "prefix-cache hit rate expected", "fraction",
           NEITHER, "shared prefixes and sessions: prompt tokens a block-granular prefix cache"
           " can serve (whole blocks of the prefix an earlier request sent) ÷ all prompt tokens",
           SESSIONS, "sessions"),
        _m("prefix_cache_hit_rate", "prefix-cache hit rate", "fraction", HIGHER, "prompt"
           " tokens served from the prefix cache ÷ all prompt tokens: the engine's own counter"
           " (reference engine), else the server's prefix-cache hits counter over the measured"
           " window (/metrics: `vllm:prefix_cache_hits`); `prefix_cache_hit_source` says which",
           PREFIX_HITS, "sessions"),
        _m("prefix_cache_hit_tokens", "prefix-cache hit tokens", "tokens", NEITHER,
           "prompt tokens the engine (or the server, by its counter) served from its prefix"
           " cache in the measured window", PREFIX_HITS, "sessions"),
        _m("saturated_at_rps", "saturated at", "req/s", NEITHER, "the offered rate at which"
           " the engine's queue grew without bound and the run stopped early (open loop with"
           " `scenario.saturation.enabled`)", "llmperf/run/runner.py:saturation_summary", thr),
        *_steady_figures(),
    ]
    window, split = "llmperf/serverside/window.py:window_summary", \
        "llmperf/serverside/decomposition.py:decompose"
    srv = "server"
    histogram = (" over the measured window, from the server's /metrics histogram: `{count, mean,"
                 " median, p90, p99}`, the mean exact (sum ÷ count), the percentiles interpolated"
                 " in its buckets")
    metrics += [
        _m("server_ttft_s", "server TTFT", "s", LOWER, "the server's own time from a request's"
           " arrival (vLLM: at its HTTP frontend) to its first token" + histogram, window, srv,
           distribution=True),
        _m("server_queue_s", "server queue", "s", LOWER, "the server's time from arrival at its"
           " engine to the first step that runs the request" + histogram, window, srv,
           distribution=True),
        _m("server_prefill_s", "server prefill", "s", LOWER, "the server's time from first"
           " scheduled to first token" + histogram, window, srv, distribution=True),
        _m("server_decode_s", "server decode", "s", LOWER, "the server's time from first token"
           " to last token" + histogram, window, srv, distribution=True),
        _m("server_e2e_s", "server E2E", "s", LOWER, "the server's time from a request's"
           " arrival to its last token" + histogram, window, srv, distribution=True),
        _m("server_tpot_s", "server TPOT", "s", LOWER, "per request, the server's decode time"
           " ÷ (output tokens − 1)" + histogram, window, srv, distribution=True),
        _m("server_output_tokens", "server output tokens", "tokens", NEITHER, "the server's"
           " generated-tokens counter, its difference over the measured window", window, srv),
        _m("server_prompt_tokens", "server prompt tokens", "tokens", NEITHER, "the server's"
           " prompt-tokens counter, its difference over the measured window", window, srv),
        _m("server_preemptions", "server preemptions", "preemptions", LOWER, "requests the"
           " server preempted (vLLM) or retracted (SGLang) in the measured window", window, srv),
        _m("server_prefix_cache_hit_rate", "server prefix-cache hit rate", "fraction", HIGHER,
           "prompt tokens the server found in its prefix cache ÷ those it looked up, over the"
           " measured window", window, srv),
        _m("server_spec_decode_acceptance_rate", "speculative acceptance rate", "fraction", HIGHER,
           "draft tokens the server accepted ÷ draft tokens proposed over the measured window"
           " (vLLM's `vllm:spec_decode_num_accepted_tokens` ÷ `..._num_draft_tokens`)",
           "llmperf/serverside/spec_decode.py:spec_decode_figures", srv),
        _m("server_spec_decode_mean_accepted_length", "speculative mean accepted length", "tokens",
           HIGHER, "tokens each speculative step yields: 1 + accepted draft tokens ÷ drafts over"
           " the measured window, as vLLM's own log computes it",
           "llmperf/serverside/spec_decode.py:spec_decode_figures", srv),
        _m("server_spec_decode_drafts", "speculative drafts", "steps", NEITHER, "the server's"
           " drafts-proposed counter, its difference over the measured window", window, srv),
        _m("server_spec_decode_draft_tokens", "speculative draft tokens", "tokens", NEITHER,
           "the server's draft-tokens-proposed counter, its difference over the measured window",
           window, srv),
        _m("server_spec_decode_accepted_tokens", "speculative accepted tokens", "tokens", NEITHER,
           "the server's accepted-draft-tokens counter, its difference over the measured window",
           window, srv),
        _m("server_kv_cache_usage_max", "server KV-cache usage, peak", "fraction", NEITHER,
           "the highest share of the server's KV cache in use at a scrape inside the window",
           window, srv),
        _m("server_waiting_max", "server waiting requests, peak", "requests", NEITHER, "the"
           " most requests waiting for the server's scheduler at a scrape inside the window",
           window, srv),
        _m("ttft_overhead_s", "TTFT overhead", "s", LOWER, "client TTFT − the server's share"
           " (queue + prefill, else its whole TTFT): the network, HTTP and JSON on both sides,"
           " the server's frontend, the client's dispatch lag. `{mean, median, p90, p99}`: the"
           " mean exact over the same requests, a percentile the client's minus the server's",
           split, srv, distribution=True),
        _m("e2e_overhead_s", "E2E overhead", "s", LOWER, "client E2E − the server's share"
           " (queue + prefill + decode, else its whole E2E), as `ttft_overhead_s`", split, srv,
           distribution=True),
        _m("ttft_overhead_pct", "TTFT overhead share", "%", LOWER, "`ttft_overhead_s` mean ÷"
           " client TTFT mean × 100", split, srv),
        _m("e2e_overhead_pct", "E2E overhead share", "%", LOWER, "`e2e_overhead_s` mean ÷"
           " client E2E mean × 100", split, srv),
        _m("ttft_frontend_s", "server frontend (TTFT)", "s", LOWER, "the server's TTFT mean −"
           " its queue and prefill means: vLLM's TTFT starts at its HTTP frontend and its queue"
           " at the engine core, so this is tokenization and the hand-off", split, srv),
        _m("ttft_network_s", "client and network (TTFT)", "s", LOWER, "client TTFT mean − the"
           " server's TTFT mean: HTTP, the network and the client, dispatch lag included",
           split, srv),
        _m("e2e_frontend_s", "server frontend (E2E)", "s", LOWER, "the server's E2E mean − its"
           " queue, prefill and decode means", split, srv),
        _m("e2e_network_s", "client and network (E2E)", "s", LOWER, "client E2E mean − the"
           " server's E2E mean", split, srv),
        _m("server_round_trip_s", "HTTP round trip", "s", LOWER, "the time a GET of the server's"
           " /v1/models took, timed beside each scrape inside the measured window: the network,"
           " both HTTP stacks and the server's event loop, none of its engine. `{count, mean,"
           " median, p90, p99}` over the probes", "llmperf/serverside/window.py:round_trip_summary",
           srv, distribution=True),
        _m("ttft_transport_s", "transport (measured)", "s", LOWER, "client send mean (dispatch"
           " lag mean where the engine has no `client_send_s`) + HTTP round-trip median: the"
           " client/network part of the split, timed by the client on its own; one figure under"
           " both names", split, srv, family="{kind}_transport_s"),
        _m("e2e_transport_s", "transport (measured), E2E", "s", LOWER, "as `ttft_transport_s`",
           split, srv, family="{kind}_transport_s"),
        _m("ttft_unexplained_s", "unexplained (TTFT)", "s", NEITHER, "client TTFT mean − server"
           " queue − prefill − frontend − transport: what the split's parts, each from its own"
           " source, leave over (the frontend stays in it where the server has no whole TTFT)",
           split, srv),
        _m("e2e_unexplained_s", "unexplained (E2E)", "s", NEITHER, "client E2E mean − server"
           " queue − prefill − decode − frontend − transport", split, srv),
        _m("ttft_unexplained_pct", "unexplained share (TTFT)", "%", NEITHER, "`ttft_unexplained_s`"
           " ÷ client TTFT mean × 100; the `split_closes` warning past ±5", split, srv),
        _m("e2e_unexplained_pct", "unexplained share (E2E)", "%", NEITHER, "`e2e_unexplained_s`"
           " ÷ client E2E mean × 100", split, srv),
    ]
    return metrics
