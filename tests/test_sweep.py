import csv
import json
import logging
import math
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from llmperf.report.errors import ReportError
from llmperf.report.sweep import (
    FIGURES,
    build_sweep_report,
    load_sweep,
    pareto_front,
    pivots,
    write_sweep_csv,
)
from llmperf.run.sweep_callback import SweepReport
from tests.test_gate_support import summary, write_sweep
from tests.test_report_support import write_realistic_sweep


def hydra_config(sweep_dir):
    return OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}})


def test_pareto_front_by_hand():
    throughput = [100.0, 200.0, 150.0, 200.0, 50.0, None, 60.0]
    latency = [1.0, 2.0, 1.5, 1.0, 0.5, 0.1, float("nan")]
    # (200, 1.0) beats (100, 1.0), (200, 2.0) and (150, 1.5); (50, 0.5) is the fastest;
    # jobs without both figures are off the frontier.
    assert pareto_front(throughput, latency) == [False, False, False, True, True, False, False]


def test_equal_jobs_are_both_on_the_front():
    assert pareto_front([100.0, 100.0], [1.0, 1.0]) == [True, True]


def test_the_rate_is_the_x_axis_and_the_strategy_the_group(tmp_path):
    sweep = load_sweep(write_realistic_sweep(tmp_path / "sweep"))
    assert sweep.x_key == "scenario.arrival.rate_rps"
    assert sweep.group_keys == ["engine.batching"]
    assert list(sweep.table["engine.batching"]) == ["continuous", "continuous", "static", "static"]
    assert list(sweep.table["scenario.arrival.rate_rps"]) == ["4", "8", "4", "8"]


def test_a_hinted_numeric_override_wins_the_x_axis(tmp_path):
    jobs = {f"engine.max_num_seqs={n},scenario.arrival.rate_rps={r}": summary()
            for n in (8, 16) for r in (1, 2)}
    sweep = load_sweep(write_sweep(tmp_path / "sweep", jobs))
    assert (sweep.x_key, sweep.group_keys) == ("scenario.arrival.rate_rps",
                                               ["engine.max_num_seqs"])


def test_sweep_csv_has_a_row_per_job_with_overrides_and_figures(tmp_path):
    folder = write_realistic_sweep(tmp_path / "sweep")
    write_sweep_csv(load_sweep(folder))
    rows = list(csv.DictReader((folder / "sweep.csv").open()))
    assert len(rows) == 4
    assert list(rows[0])[:3] == ["job", "engine.batching", "scenario.arrival.rate_rps"]
    assert set(FIGURES) <= set(rows[0])
    for row in rows:
        data = json.loads((folder / row["job"] / "summary.json").read_text())
        assert float(row["output_throughput_tps"]) == pytest.approx(data["output_throughput_tps"])
        assert float(row["ttft_p99_s"]) == pytest.approx(data["ttft_s"]["p99"])
        assert float(row["tpot_p50_s"]) == pytest.approx(data["tpot_s"]["median"])
        assert float(row["usd_per_1m_tokens"]) == pytest.approx(data["usd_per_1m_tokens"])
    # Continuous batching serves 8 at once, static 2: continuous holds the whole frontier.
    front = {(r["engine.batching"], r["scenario.arrival.rate_rps"]) for r in rows
             if r["pareto_ttft_p99"] == "True"}
    naive = pareto_front([float(r["output_throughput_tps"]) for r in rows],
                         [float(r["ttft_p99_s"]) for r in rows])
    assert front == {(r["engine.batching"], r["scenario.arrival.rate_rps"])
                     for r, f in zip(rows, naive, strict=True) if f}
    assert {b for b, _ in front} == {"continuous"}


def test_pivots_put_strategies_side_by_side_per_rate(tmp_path):
    sweep = load_sweep(write_realistic_sweep(tmp_path / "sweep"))
    table = next(p for p in pivots(sweep) if p["title"] == "Output throughput (tok/s)")
    assert table["xs"] == ["4", "8"]
    assert [r["group"] for r in table["rows"]] == ["batching=continuous", "batching=static"]
    cont = sweep.table[sweep.table["engine.batching"] == "continuous"]["output_throughput_tps"]
    assert [c["text"] for c in table["rows"][0]["cells"]] == [f"{v:.3g}" for v in cont]
    assert [c["best"] for c in table["rows"][0]["cells"]] == [True, True]


def test_missing_figures_are_empty_cells(tmp_path):
    jobs = {"engine.batching=static": summary(), "engine.batching=continuous": summary()}
    del jobs["engine.batching=static"]["goodput_rps"]
    folder = write_sweep(tmp_path / "sweep", jobs)
    sweep = load_sweep(folder)
    goodput = dict(zip(sweep.table["engine.batching"], sweep.table["goodput_rps"], strict=True))
    assert goodput["static"] is None or math.isnan(goodput["static"])
    write_sweep_csv(sweep)
    rows = {r["engine.batching"]: r for r in csv.DictReader((folder / "sweep.csv").open())}
    assert rows["static"]["goodput_rps"] == ""


def test_a_sweep_where_no_job_has_a_tpot_still_builds_its_report(tmp_path):
    # One output token per request (scenario.output_tokens.value=1): no TPOT in any job.
    no_tpot = dict.fromkeys(("mean", "median", "p90", "p95", "p99", "std", "min", "max"))
    jobs = {f"scenario.arrival.rate_rps={r}": summary(output_throughput_tps=100.0 * r,
                                                      tpot_s=no_tpot) for r in (1, 2, 4)}
    folder = write_sweep(tmp_path / "sweep", jobs)
    report = build_sweep_report(folder)
    sweep = load_sweep(folder)
    assert sweep.table["tpot_p99_s"].isna().all()
    assert sweep.table["tpot_p99_s"].dtype == float
    assert list(sweep.table["output_throughput_tps"]) == [100.0, 200.0, 400.0]
    assert list(sweep.table["pareto_tpot_p99"]) == [False, False, False]
    assert (folder / "plots" / "sweep_pareto.png").is_file()
    assert (folder / "plots" / "sweep_load.png").is_file()
    assert [p["title"] for p in pivots(sweep)] == ["Output throughput (tok/s)",
                                                   "Goodput (req/s)", "TTFT p99 (ms)"]
    rows = list(csv.DictReader((folder / "sweep.csv").open()))
    assert [r["tpot_p99_s"] for r in rows] == ["", "", ""]
    assert "TPOT p99 ms" not in report.read_text()


def test_callback_writes_csv_and_report_in_the_sweep_folder(tmp_path):
    folder = write_realistic_sweep(tmp_path / "sweep")
    (folder / "engine.batching=chunked,scenario.arrival.rate_rps=4" / ".hydra").mkdir(parents=True)
    SweepReport().on_multirun_end(hydra_config(folder))
    assert len((folder / "sweep.csv").read_text().splitlines()) == 1 + 4
    html = (folder / "report.html").read_text()
    assert "1 job left no summary.json" in html and "batching=chunked" in html


def test_one_unreadable_summary_leaves_the_other_jobs_compared(tmp_path):
    folder = write_realistic_sweep(tmp_path / "sweep")
    broken = "engine.batching=static,scenario.arrival.rate_rps=8"
    (folder / broken / "summary.json").write_text('{"schema_version": 1, "valid": tr')
    old = "engine.batching=static,scenario.arrival.rate_rps=4"
    data = json.loads((folder / old / "summary.json").read_text())
    (folder / old / "summary.json").write_text(json.dumps({**data, "schema_version": 0}))
    sweep = load_sweep(folder)
    assert list(sweep.table["engine.batching"]) == ["continuous", "continuous"]
    assert list(sweep.without_summary) == [old, broken]
    assert sweep.without_summary[broken].endswith("summary.json: not valid JSON"
                                                  " (Expecting value at line 1)")
    assert "schema_version 0" in sweep.without_summary[old]
    html = build_sweep_report(folder).read_text()
    assert "2 jobs left no summary.json, or an unreadable one" in html
    assert "not valid JSON (Expecting value at line 1)" in html


def test_a_sweep_without_one_readable_summary_is_an_error_naming_each_job(tmp_path):
    folder = write_sweep(tmp_path / "sweep", {"a=1": summary(), "a=2": summary()})
    (folder / "a=1" / "summary.json").write_text("[")
    (folder / "a=2" / "summary.json").unlink()
    with pytest.raises(ReportError, match=r"no readable summary.json in the subfolders of .*;"
                       r" a=1: .*not valid JSON.*; a=2: no summary.json"):
        load_sweep(folder)


def test_callback_with_reports_disabled_writes_the_csv_but_no_page_or_plots(tmp_path):
    folder = write_realistic_sweep(tmp_path / "sweep")
    config = OmegaConf.merge(hydra_config(folder), {"report": {"enabled": False}})
    SweepReport().on_multirun_end(config)
    rows = list(csv.DictReader((folder / "sweep.csv").open()))
    assert [r["job"] for r in rows] == list(load_sweep(folder).table["job"])
    assert {r["engine.batching"] for r in rows} == {"static", "continuous"}
    assert not (folder / "report.html").exists()
    assert not (folder / "plots").exists()


def test_callback_warns_instead_of_failing_when_no_job_left_a_summary(tmp_path, caplog):
    (tmp_path / "sweep" / "a=1" / ".hydra").mkdir(parents=True)
    with caplog.at_level(logging.WARNING, logger="llmperf.run.sweep_callback"):
        SweepReport().on_multirun_end(hydra_config(tmp_path / "sweep"))
    assert "no sweep report" in caplog.text
    assert not (tmp_path / "sweep" / "report.html").exists()


def test_a_run_folder_is_not_a_sweep(tmp_path):
    folder = write_realistic_sweep(tmp_path / "sweep")
    job = next(p for p in folder.iterdir() if p.is_dir())
    with pytest.raises(ReportError, match="run folder, not a sweep folder"):
        load_sweep(job)


def test_importing_the_callback_loads_no_plotting_library():
    code = ("import sys, llmperf.run.sweep_callback; "
            "print(sorted(m for m in ('matplotlib', 'pandas', 'jinja2') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
