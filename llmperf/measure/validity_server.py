"""The checks that hold the client's account of a run against the server's own (its
Prometheus /metrics, llmperf/serverside/): warnings, shown but not blocking.

- `server_agrees`: the client's TTFT and E2E cover the server's, by 0 to 10% of the TTFT;
- `split_closes`: the latency split's parts add up to the client's TTFT mean within 5%;
- `prefix_cache_expected`: no prefix-cache hits on prompts that share no block.
"""

from __future__ import annotations

from typing import Any

from llmperf.measure.check import Check
from llmperf.measure.check import ms as _ms
from llmperf.serverside.decomposition import client_send_mean, round_trip_median
from llmperf.workload.scenario import ValidityConfig

# The client's and the server's accounts of TTFT may differ by the network and the
# server's frontend, not by more than this share of it.
MAX_OVERHEAD_SHARE = 0.10
# The split's parts, its transport measured on its own, close on the client's TTFT mean
# within this share of it.
MAX_UNEXPLAINED_SHARE = 0.05
# Two prompts sharing fewer leading tokens than a KV block (16 in vLLM and the reference
# engine) cannot share a cached block.
MIN_SHARED_PREFIX_TOKENS = 16


def server_agrees(summary: dict[str, Any], criteria: ValidityConfig) -> Check:
    """The client's TTFT and E2E cover the server's, by 0 to 10% of the client's TTFT.

    What is compared is what lies between the two accounts: where the server times the
    whole request (vLLM's TTFT starts at its HTTP frontend), the client and the network
    (client TTFT - server TTFT), the server's frontend being the server's own time; else
    the whole overhead past the engine's parts."""
    ttft, overhead = summary.get("ttft_s") or {}, summary.get("ttft_overhead_s")
    if overhead is None or ttft.get("mean") is None:
        return Check("server_agrees", True, summary.get("server_note") or "no server-side view", blocking=False)
    frontend_s, network_s = summary.get("ttft_frontend_s"), summary.get("ttft_network_s")
    between = overhead["mean"] if network_s is None else network_s
    share = between / ttft["mean"]
    e2e_between = (summary.get("e2e_overhead_s") or {}).get("mean")
    if summary.get("e2e_network_s") is not None:
        e2e_between = summary["e2e_network_s"]
    ok = 0.0 <= share <= MAX_OVERHEAD_SHARE and (e2e_between is None or e2e_between >= 0.0)
    detail = (
        f"client TTFT mean {_ms(ttft['mean'])} = server {summary['ttft_server_parts']} "
        f"{_ms(ttft['mean'] - overhead['mean'])} + overhead {_ms(overhead['mean'])}"
    )
    if network_s is None:
        detail += f" ({share:.1%}; expected 0 to {MAX_OVERHEAD_SHARE:.0%})"
    else:
        detail += (f"; of it, server frontend {_ms(frontend_s)} and client/network {_ms(network_s)} "
                   f"({share:.1%} of the client's TTFT; expected 0 to {MAX_OVERHEAD_SHARE:.0%})")
    if e2e_between is not None:
        detail += f"; E2E {'client/network' if summary.get('e2e_network_s') is not None else 'overhead'} {_ms(e2e_between)}"
    return Check("server_agrees", ok, detail, blocking=False)


def split_closes(summary: dict[str, Any], criteria: ValidityConfig) -> Check:
    """The latency split's parts, each from its own source, add up to the client's TTFT mean
    within 5%: the server's queue, prefill and frontend, and the transport the client times
    itself (its own part of each request + the HTTP round trip of a GET beside each scrape)."""
    pct, transport = summary.get("ttft_unexplained_pct"), summary.get("ttft_transport_s")
    if pct is None or transport is None:
        return Check("split_closes", True, "not measured (no server-side view, or no round trip timed)",
                     blocking=False)
    ok = abs(pct) <= 100 * MAX_UNEXPLAINED_SHARE
    send, send_key = client_send_mean(summary)
    client = summary["ttft_s"]["mean"]
    explained = client - summary["ttft_unexplained_s"]
    frontend = summary.get("ttft_frontend_s")
    detail = (
        f"server {summary['ttft_server_parts']} {_ms(explained - transport - (frontend or 0.0))}"
        + (f" + frontend {_ms(frontend)}" if frontend is not None else "")
        + f" + transport {_ms(transport)} ({send_key.removesuffix('_s').replace('_', ' ')} {_ms(send)}"
        f" + HTTP round trip median {_ms(round_trip_median(summary))}) = {_ms(explained)}"
        f" against the client's TTFT mean {_ms(client)}: unexplained {_ms(summary['ttft_unexplained_s'])}"
        f" ({pct:+.1f}%; expected within ±{MAX_UNEXPLAINED_SHARE:.0%})"
    )
    return Check("split_closes", ok, detail, blocking=False)


def prefix_cache_unexpected(summary: dict[str, Any], criteria: ValidityConfig) -> Check:
    """Prefix-cache hits on a workload whose prompts share no block come from elsewhere:
    prompts of an earlier run still cached, or a long shared chat template."""
    hits, shared = summary.get("server_prefix_cache_hits_tokens"), summary.get("workload_shared_prefix_tokens")
    if hits is None or shared is None:
        return Check("prefix_cache_expected", True, "not measured", blocking=False)
    ok = hits == 0 or shared >= MIN_SHARED_PREFIX_TOKENS
    detail = (
        f"{hits:.0f} prompt tokens hit the server's prefix cache "
        f"(hit rate {summary.get('server_prefix_cache_hit_rate') or 0.0:.1%}); "
        f"the workload's prompts share at most {shared} leading tokens"
    )
    if not ok:
        detail += ": the cache holds prompts from before this run (a repeated seed?)"
    return Check("prefix_cache_expected", ok, detail, blocking=False)
