"""The metric catalog is the one place a figure's unit and direction live: the gate, the run
report, the comparison page, the sweep page and the docs all say what it says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llmperf.gate.metric_spec import MetricSpec
from llmperf.measure.catalog import (
    HIGHER,
    LOWER,
    METRICS,
    NEITHER,
    PHASES,
    STAT_KEYS,
    UnknownMetric,
    find,
    metric,
    scalar_names,
)
from llmperf.report import metric_docs
from llmperf.report.compare import figure_rows
from llmperf.report.folder import RunFolder
from llmperf.report.sweep import FIGURES, FLAGS, _best, bare, job_columns
from llmperf.report.units import format_value

# How each unit reads in a cell that carries its unit (the run report, the comparison page)
# and in a column header over bare numbers (the sweep page): written out here, independent
# of the formatting code.
CELL = {"s": r"\d (µs|ms|s)$", "tok/s": r" tok/s$", "req/s": r" req/s$", "fraction": r" %$",
        "USD": r"^\$\d", "USD/1M tok": r"^\$\d", "J": r" J$", "B/s": r" [kMGTP]?B/s$",
        "FLOP/s": r" [kMGTP]?FLOP/s$", "B": r" [kMGTP]?B$", "%": r"\d %$", "FLOP": r" [kMGTP]?FLOP$",
        "blocks": r"^[\d.]+$", "requests": r"^\d+$", "tokens": r"^[\d.]+$",
        "sequences": r"^[\d.]+$", "steps": r"^\d+$", "preemptions": r"^\d+$",
        "samples": r"^\d+$", "sessions": r"^\d+$"}
HEADER = {"s": " ms", "fraction": " %", "tok/s": " tok/s", "req/s": " req/s",
          "USD/1M tok": " $/1M tok", "J": " J"}


def test_every_figure_has_a_unit_a_direction_a_definition_and_a_function():
    for m in METRICS.values():
        assert m.label and len(m.definition) > 15, m.name
        assert m.direction in (HIGHER, LOWER, NEITHER)
        assert callable(m.compute()), m.computed_by


def test_a_latency_statistic_is_its_distributions_figure():
    p99 = metric("ttft_s.p99")
    assert (p99.label, p99.unit, p99.direction) == ("TTFT p99", "s", LOWER)
    assert metric("itl_s.median").label == "ITL p50"
    # any percentile report.percentiles may name is a statistic; a name that is none is not
    assert find("ttft_s.p99.9").label == "TTFT p99.9" and find("ttft_s.p42").label == "TTFT p42"
    assert find("ttft_s.p100") is None and find("ttft_s.p50") is None  # 50 is `median`
    assert find("ttft_s.q42") is None and find("ttft_s") is METRICS["ttft_s"]
    with pytest.raises(UnknownMetric, match="did you mean 'ttft_s.p99'"):
        metric("ttft_p99")


def test_the_roofline_phases_are_the_catalogs():
    from llmperf.perf.roofline import PHASES as ROOFLINE_PHASES

    assert PHASES == ROOFLINE_PHASES


def test_step_figures_compute_from_steps_jsonl_rows():
    steps = [{"num_seqs": 2, "num_prefill_tokens": 0, "num_decode_tokens": 2, "padded_tokens": 2,
              "preemptions": 1},
             {"num_seqs": 4, "num_prefill_tokens": 6, "num_decode_tokens": 0}]
    figures = {name: metric(name).compute()(steps) for name in
               ("steps.count", "steps.tokens_per_step", "steps.seqs_per_step",
                "steps.padded_fraction", "steps.preemptions")}
    assert figures == {"steps.count": 2.0, "steps.tokens_per_step": 4.0,
                       "steps.seqs_per_step": 3.0, "steps.padded_fraction": 0.2,
                       "steps.preemptions": 1.0}


def run_folder(name: str, summary: dict) -> RunFolder:
    return RunFolder(Path(name), {"valid": True, **summary}, [], None, None, None, {}, None,
                     [], [])


def nested(name: str, value: float) -> dict:
    key, dot, stat = name.partition(".")
    return {key: {stat: value}} if dot else {key: value}


def comparison_best(name: str) -> str:
    """Which way the comparison page marks the better of 1 and 2 ("neither": no mark)."""
    row, = figure_rows([run_folder("a", nested(name, 1.0)), run_folder("b", nested(name, 2.0))])
    marked = [c["best"] for c in row["cells"]]
    return {(False, True): HIGHER, (True, False): LOWER, (False, False): NEITHER}[tuple(marked)]


def sweep_best(column: str) -> str:
    best = _best([1.0, 2.0], column)
    return {2.0: HIGHER, 1.0: LOWER, None: NEITHER}[best]


@pytest.mark.parametrize("name", list(scalar_names()))
def test_gate_and_reports_show_each_figure_with_the_catalogs_unit_and_direction(name):
    m = metric(name)
    if m.direction != NEITHER:  # the gate takes only figures with a better way
        spec = MetricSpec.parse(name)
        assert (spec.direction, spec.unit) == (m.direction, m.unit)
    value = 2 if m.unit in ("requests", "steps", "preemptions", "samples", "sessions") else 2.0
    assert re.search(CELL[m.unit], format_value(name, value)), format_value(name, value)


def test_the_comparison_page_ranks_and_shows_units_as_the_catalog_says():
    from llmperf.report.compare import COMPARED

    for name in COMPARED:
        m = metric(name)
        assert comparison_best(name) == m.direction, name
        value = 2 if m.unit == "requests" else 2.0
        row, = figure_rows([run_folder("a", nested(name, value))])
        text = row["cells"][0]["text"]
        if m.group == "latency":
            assert text.endswith(" ms")  # latencies line up in one scale on this page
        else:
            assert re.search(CELL[m.unit], text), (name, text)


def test_the_sweep_page_ranks_and_heads_columns_as_the_catalog_says():
    import pandas as pd

    from llmperf.report.sweep import Sweep

    assert [bare("valid", v) for v in (True, False, None)] == ["yes", "no", "–"]
    for column, name in FIGURES.items():
        if column in FLAGS:
            continue
        m = metric(name)
        assert sweep_best(column) == m.direction, column
        table = pd.DataFrame({c: [1.0] for c in FIGURES})
        title = dict(job_columns(Sweep(Path("."), table, [], None, [])))
        if column in title:
            assert title[column].endswith(HEADER.get(m.unit, "")), title[column]
        assert bare(column, 2.0) == {"s": "2,000", "fraction": "200"}.get(m.unit, "2.00")


def test_the_docs_metric_tables_are_the_catalogs():
    """Fails when a docs table was edited by hand or the catalog changed without
    `python -m llmperf.report.metric_docs`."""
    assert metric_docs.main(["--check"]) == 0
    for name in metric_docs.DOCS:
        text = (metric_docs.ROOT / name).read_text(encoding="utf-8")
        assert "<!-- metric table:" in text, name


def test_the_docs_list_every_figure():
    docs = "".join((metric_docs.ROOT / n).read_text(encoding="utf-8") for n in metric_docs.DOCS)
    for m in METRICS.values():
        assert f"`{m.name}`" in docs or m.name.endswith("_measured"), m.name
    for stat in STAT_KEYS:
        assert stat in docs


def test_every_figure_a_real_run_writes_is_declared_in_the_catalog(tmp_path):
    """A reference-engine run with telemetry, roofline, prediction and cost: each number of
    its summary.json is a catalog figure, or the peak or mean of a telemetry column (whose
    name carries its unit)."""
    import io
    import json

    from rich.console import Console

    from llmperf.run.runner import run_benchmark
    from tests.test_run_figures import compose_config

    config = compose_config([
        "scenario=offline", "scenario.num_requests=4", "scenario.warmup_requests=1",
        "scenario.prompt_tokens.dist=fixed", "scenario.prompt_tokens.value=32",
        "scenario.output_tokens.dist=fixed", "scenario.output_tokens.value=8",
        "engine.batching=continuous", "telemetry.interval_s=0.05", "hardware=cpu",
        "hardware.usd_per_hour=0.36", "report.enabled=false",
    ])
    run_benchmark(config, tmp_path, console=Console(file=io.StringIO()))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["token_count_source"] == "engine"
    numbers = [k for k, v in summary.items()
               if isinstance(v, (int, float, dict)) and not isinstance(v, bool)
               and k not in ("schema_version", "engine", "scenario", "model", "hardware",
                             "slo", "token_count_sources", "origin_unix_s",
                             "origin_perf_counter_s", "measure_start_s")]
    undeclared = [k for k in numbers if find(k) is None
                  and not k.startswith(("telemetry_peak_", "telemetry_mean_"))]
    assert undeclared == []
    assert {"mbu_decode", "mfu_prefill", "usd_per_1m_tokens", "predicted_ttft_s",
            "telemetry_num_samples"} <= set(numbers)
