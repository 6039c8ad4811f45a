"""The figures of a summary.json arranged for a page: headline tiles, then tables.

Every value leaves here as text with its unit; templates only lay it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmperf.measure.catalog import STAT_KEYS, in_group, is_stat_key
from llmperf.measure.run_files import lookup, number
from llmperf.report.units import MISSING, duration, format_value, milliseconds

# The tables after the latency table: (title, catalog groups, other summary keys shown there
# by prefix: the labels that say how the figures were made, telemetry columns' peaks).
SECTIONS = (("Throughput and counts", ("throughput", "counts"), ("token_count_source",)),
            ("The client", ("client",), ()),
            ("Roofline", ("roofline",), ("roofline_",)),
            ("Prediction", ("prediction",), ()),
            (COST_SECTION := "Cost and energy", ("cost",), ("cost_split",)),
            ("Telemetry", ("telemetry",), ("telemetry_", "throttle")))


@dataclass
class Tile:
    label: str
    value: str
    detail: str = ""


@dataclass
class Row:
    key: str
    value: str


def headline(summary: dict[str, Any]) -> list[Tile]:
    """The figures a reader wants first, as tiles."""
    def n(path: str) -> float | None:
        return number(summary, path)

    fmt = format_value
    tiles = [
        Tile("output throughput", fmt("output_throughput_tps", n("output_throughput_tps")),
             f"{fmt('total_throughput_tps', n('total_throughput_tps'))} with prompt tokens"),
        Tile("requests", fmt("request_throughput_rps", n("request_throughput_rps")),
             f"{_count(summary, 'num_completed')} of {_count(summary, 'num_requests')} completed"
             f" in {fmt('duration_s', n('duration_s'))}"),
        Tile("TTFT p50 · p99", f"{milliseconds(n('ttft_s.median'))} · "
             f"{milliseconds(n('ttft_s.p99'))} ms", f"mean {milliseconds(n('ttft_s.mean'))} ms"),
        Tile("TPOT p50 · p99", f"{milliseconds(n('tpot_s.median'))} · "
             f"{milliseconds(n('tpot_s.p99'))} ms", f"ITL p99 {milliseconds(n('itl_s.p99'))} ms"),
    ]
    if n("goodput_rps") is not None:
        tiles.append(Tile("goodput", fmt("goodput_rps", n("goodput_rps")),
                          f"SLO met by {fmt('slo_attainment', n('slo_attainment'))}"
                          f" ({slo_text(summary)})"))
    if n("mbu_decode") is not None or n("roofline_fraction") is not None:
        tiles.append(Tile("MBU decode", fmt("mbu_decode", n("mbu_decode")),
                          f"{fmt('roofline_fraction', n('roofline_fraction'))} of roofline tok/s"
                          f"; MFU prefill {fmt('mfu_prefill', n('mfu_prefill'))}"))
    if n("usd_per_1m_tokens") is not None:
        tiles.append(Tile("cost per 1M tokens", fmt("usd_per_1m_tokens", n("usd_per_1m_tokens")),
                          f"{fmt('usd_per_1m_output_tokens', n('usd_per_1m_output_tokens'))}"
                          " per 1M output tokens"))
    if n("energy_per_output_token_j") is not None:
        tiles.append(Tile("energy per output token",
                          fmt("energy_per_output_token_j", n("energy_per_output_token_j")),
                          f"{fmt('energy_j', n('energy_j'))} over the"
                          f" {fmt('duration_s', n('duration_s'))} measured window"))
    return tiles


def slo_text(summary: dict[str, Any]) -> str:
    slo = summary.get("slo") if isinstance(summary.get("slo"), dict) else {}
    parts = [f"{name} ≤ {duration(slo[key])}" for key, name in
             (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E")) if slo.get(key)]
    return ", ".join(parts) or "no SLO set"


def summary_stats(summary: dict[str, Any]) -> tuple[str, ...]:
    """The statistics the run's distributions hold (its report.percentiles), in order."""
    held = summary.get("ttft_s")
    if not isinstance(held, dict) or not held:
        return STAT_KEYS
    return tuple(k for k in held if is_stat_key(k))


def latency_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per latency: its name, meaning and each statistic in ms."""
    rows, keys = [], summary_stats(summary)
    for m in in_group("latency"):
        stats = summary.get(m.name)
        if not isinstance(stats, dict) or all(stats.get(s) is None for s in keys):
            continue
        rows.append({"name": m.label, "meaning": m.definition.replace("**", ""),
                     "values": [milliseconds(stats.get(s)) for s in keys]})
    return rows


def stage_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per stage of scenario.stages: its load, the rate offered, its key figures."""
    rows = []
    for st in summary.get("stages") or []:
        if not isinstance(st, dict):
            continue
        ttft, tpot = st.get("ttft_s") or {}, st.get("tpot_s") or {}
        offered, error = st.get("offered_rate_rps"), st.get("offered_rate_error_pct")
        rows.append({
            "stage": st.get("stage"), "load": st.get("load", ""),
            "offered": "-" if offered is None else f"{offered:.2f}" + (
                f" ({error:+.1f}%)" if error is not None else ""),
            "completed": f"{st.get('num_completed', 0)}/{st.get('num_requests', 0)}",
            "ttft_p50": milliseconds(ttft.get("median")), "ttft_p99": milliseconds(ttft.get("p99")),
            "tpot_p50": milliseconds(tpot.get("median")),
            "output_tps": "-" if st.get("output_throughput_tps") is None
            else f"{st['output_throughput_tps']:.1f}",
            "client_queue": milliseconds((st.get("client_queue_s") or {}).get("mean")),
            "note": "saturated: the run stopped here" if st.get("saturated")
            else ("" if st.get("ran") else "not run"),
        })
    return rows


def section_rows(summary: dict[str, Any], groups: tuple[str, ...],
                 prefixes: tuple[str, ...]) -> list[Row]:
    """The catalog's figures of `groups` that the summary holds, in catalog order, then its
    other keys that start with one of `prefixes`."""
    rows, keys = [], []
    for m in in_group(*groups):
        value = summary.get(m.name)
        if isinstance(value, dict):  # a distribution: its median and its maximum
            rows += [Row(f"{m.name}.{stat}", format_value(m.name, value.get(stat)))
                     for stat in ("median", "max")]
        elif m.name in summary:
            keys.append(m.name)
            rows.append(Row(m.name, format_value(m.name, value)))
    rows += [Row(k, format_value(k, v)) for k, v in summary.items()
             if k.startswith(prefixes) and k not in keys and not isinstance(v, dict)]
    return rows


def sections(summary: dict[str, Any]) -> list[tuple[str, list[Row]]]:
    """The tables after the latency table, those with at least one row."""
    found = [(title, section_rows(summary, groups, prefixes))
             for title, groups, prefixes in SECTIONS]
    return [(title, with_window(summary, table) if title == COST_SECTION else table)
            for title, table in found if table]


def with_window(summary: dict[str, Any], table: list[Row]) -> list[Row]:
    """The cost and energy rows, after the one window both cover."""
    return [Row("window", window_text(summary)), *table]


def window_text(summary: dict[str, Any]) -> str:
    """'measured window, 0.52 s to 10.3 s (9.78 s): cost and energy both'."""
    start, end = number(summary, "window_start_s"), number(summary, "window_end_s")
    if start is None or end is None:
        return MISSING
    return (f"measured window, {duration(start)} to {duration(end)}"
            f" ({duration(end - start)}): cost and energy both")


def validity(summary: dict[str, Any]) -> list[dict[str, Any]]:
    checks = summary.get("validity")
    return [c for c in checks if isinstance(c, dict)] if isinstance(checks, list) else []


def _describe(c: dict[str, Any]) -> str:
    return f"{c.get('check')}: {c.get('detail')}" if c.get("detail") else str(c.get("check"))


def failed_checks(summary: dict[str, Any]) -> list[str]:
    return [_describe(c) for c in validity(summary) if not c.get("ok") and c.get("blocking", True)]


def warnings(summary: dict[str, Any]) -> list[str]:
    """Failed checks that do not make a run invalid (the server's account disagreeing)."""
    return [_describe(c) for c in validity(summary) if not c.get("ok") and not c.get("blocking", True)]


SPLIT_PARTS = ("frontend_s", "network_s", "transport_s", "unexplained_s", "unexplained_pct")


def server_rows(summary: dict[str, Any]) -> list[Row]:
    """The server's counters and gauge levels over the measured window (its histograms are in
    the split table), the parts of the split's overhead, and the measured transport's two parts:
    the client's own part of a request (mean) and the HTTP round trip (median, and its mean)."""
    rows = [Row(k, format_value(k, v)) for k, v in summary.items()
            if k.startswith("server_") and not isinstance(v, dict)]
    rows += [Row(k, format_value(k, v)) for k, v in summary.items()
             if k.startswith(("ttft_", "e2e_")) and k.endswith(SPLIT_PARTS) and v is not None]
    send = summary.get("client_send_s")
    if isinstance(send, dict) and send.get("mean") is not None:
        rows.append(Row("client_send_s.mean", format_value("client_send_s", send["mean"])))
    round_trip = summary.get("server_round_trip_s")
    for stat in ("median", "mean"):
        if isinstance(round_trip, dict) and round_trip.get(stat) is not None:
            rows.append(Row(f"server_round_trip_s.{stat}", format_value("server_round_trip_s", round_trip[stat])))
    return rows


def run_title(summary: dict[str, Any], fallback: str) -> str:
    """'chat · reference (continuous) · tiny · cpu' from the summary's objects."""
    engine = summary.get("engine") if isinstance(summary.get("engine"), dict) else {}
    batching = lookup(engine, "config.batching") or engine.get("batching")
    parts = [lookup(summary, "scenario.name"),
             f"{engine.get('name')} ({batching})" if batching else engine.get("name"),
             lookup(summary, "model.label") or lookup(summary, "model.name"),
             lookup(summary, "hardware.name")]
    names = [str(p) for p in parts if p]
    return " · ".join(names) or fallback


def flatten(data: Any, prefix: str = "") -> list[Row]:
    """Nested dicts as dotted keys, lists joined: a table of an environment.json."""
    if isinstance(data, dict):
        out: list[Row] = []
        for key, value in data.items():
            out.extend(flatten(value, f"{prefix}{key}."))
        return out
    key = prefix.rstrip(".")
    if isinstance(data, list) and all(not isinstance(v, (dict, list)) for v in data):
        return [Row(key, " ".join(str(v) for v in data) or MISSING)]
    if isinstance(data, list):
        return [row for i, v in enumerate(data) for row in flatten(v, f"{prefix}{i}.")]
    return [Row(key, MISSING if data is None else str(data))]


def _count(summary: dict[str, Any], key: str) -> str:
    value = summary.get(key)
    return f"{value:,}" if isinstance(value, int) else MISSING

