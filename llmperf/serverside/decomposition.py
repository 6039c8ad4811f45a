"""Where the client's latency went: server queue, prefill and decode, and the rest.

    client TTFT = server queue + server prefill + overhead
    client E2E  = server queue + server prefill + server decode + overhead

The overhead is everything the server's engine did not time: the network, HTTP and
JSON on both sides, the server's tokenization and detokenization, its frontend-to-engine
hand-off, and the client's dispatch lag (client TTFT counts from the intended arrival).
Means decompose exactly (a mean of sums is the sum of means, over the same requests).
Percentiles do not add up, so at median/p90/p99 the overhead is the client's percentile
minus the server's own TTFT (or E2E) percentile, itself interpolated from buckets.

Where the server also times the whole request from its own arrival (vLLM's TTFT and E2E
histograms start when its HTTP frontend receives the request; its queue, prefill and
decode times are the engine core's), the overhead splits once more, by means:

    overhead = server frontend (server TTFT - queue - prefill) + client/network (client TTFT - server TTFT)

Those parts add up by construction. What makes the split a check is one part measured on
its own: the transport, the client's own part of each request (`client_send_s`, mean:
intended arrival to the request's last byte written, timed on every request) plus the HTTP
round trip of a cheap GET timed beside each scrape (median; llmperf/serverside/scraper.py).
The client's part is the requests' own, so a stall of the client (a busy core, a collection)
lands in it where it happened; the round trip is a sample of the path, so one probe caught
in such a stall (280 ms against 1.5 ms, seen here) must not move it: hence its median.
Engines without `client_send_s` (results from before it) fall back to the dispatch lag. Then

    client TTFT = queue + prefill + frontend + transport + unexplained

and the unexplained rest, as a share of the client's mean, says whether the parts close
(the `split_closes` validity check: within 5%). Where the server has no whole TTFT, the
frontend has no figure of its own and stays in the unexplained rest.
"""

from __future__ import annotations

from typing import Any

PERCENTILES = ("median", "p90", "p99")


def _mean(summary: dict[str, Any], key: str) -> float | None:
    value = summary.get(key)
    return value.get("mean") if isinstance(value, dict) else None


def _server_part(summary: dict[str, Any], parts: tuple[str, ...], whole: str) -> tuple[float, str] | None:
    """The server's share of a mean: its parts summed when it has them all, else its whole."""
    means = [_mean(summary, f"server_{p}") for p in parts]
    if all(m is not None for m in means):
        return sum(means), "+".join(parts)
    whole_mean = _mean(summary, f"server_{whole}")
    return (whole_mean, whole) if whole_mean is not None else None


def _overhead(summary: dict[str, Any], client_key: str, parts: tuple[str, ...], whole: str) -> dict[str, Any]:
    client = summary.get(client_key)
    server = _server_part(summary, parts, whole)
    if not isinstance(client, dict) or client.get("mean") is None or server is None:
        return {}
    name = client_key.removesuffix("_s")
    overhead = {"mean": client["mean"] - server[0]}
    server_whole = summary.get(f"server_{whole}")
    for p in PERCENTILES:
        if isinstance(server_whole, dict) and server_whole.get(p) is not None and client.get(p) is not None:
            overhead[p] = client[p] - server_whole[p]
    out = {
        f"{name}_overhead_s": overhead,
        f"{name}_overhead_pct": 100.0 * overhead["mean"] / client["mean"] if client["mean"] else None,
        f"{name}_server_parts": server[1],
    }
    whole_mean = _mean(summary, f"server_{whole}")
    frontend = None
    if whole_mean is not None and server[1] != whole:
        frontend = whole_mean - server[0]
        out[f"{name}_frontend_s"] = frontend
        out[f"{name}_network_s"] = client["mean"] - whole_mean
    transport = _transport(summary)
    if transport is not None:
        unexplained = overhead["mean"] - (frontend or 0.0) - transport
        out[f"{name}_transport_s"] = transport
        out[f"{name}_unexplained_s"] = unexplained
        out[f"{name}_unexplained_pct"] = 100.0 * unexplained / client["mean"] if client["mean"] else None
    return out


def client_send_mean(summary: dict[str, Any]) -> tuple[float, str] | None:
    """The client's own part of a request (mean) and its figure: client_send_s where the
    engine timed it, else the dispatch lag."""
    for key in ("client_send_s", "dispatch_lag_s"):
        value = _mean(summary, key)
        if value is not None:
            return value, key
    return None


def round_trip_median(summary: dict[str, Any]) -> float | None:
    value = summary.get("server_round_trip_s")
    return value.get("median") if isinstance(value, dict) else None


def _transport(summary: dict[str, Any]) -> float | None:
    """Client send mean + HTTP round-trip median: the part the client measures on its own."""
    send, round_trip = client_send_mean(summary), round_trip_median(summary)
    return None if send is None or round_trip is None else send[0] + round_trip


def decompose(summary: dict[str, Any]) -> dict[str, Any]:
    """ttft_/e2e_ overhead keys for summary.json; {} without a server-side view."""
    return {
        **_overhead(summary, "ttft_s", ("queue_s", "prefill_s"), "ttft_s"),
        **_overhead(summary, "e2e_s", ("queue_s", "prefill_s", "decode_s"), "e2e_s"),
    }
