"""summary.json is a typed Summary with a schema version, read by one reader
(llmperf/measure/run_files.py): the gate and the report read the same versions and refuse the
same others, with one line and exit code 2."""

from __future__ import annotations

import json

import pytest

from llmperf.gate.cli import main as gate_main
from llmperf.measure.run_files import read_summary
from llmperf.measure.summary import (
    SCHEMA_VERSION,
    MalformedSummary,
    Summary,
    UnsupportedSummary,
)
from llmperf.measure.validity import Check
from llmperf.report.cli import main as report_main
from llmperf.report.folder import load_run_folder
from tests.test_report_support import write_realistic_run


def test_a_summary_round_trips_through_its_dict():
    summary = Summary(engine={"name": "reference"}, scenario={"name": "chat"},
                      model={"name": "tiny"}, hardware={"name": "cpu"}, valid=True,
                      validity=[Check("warmup", True, "2 of 2 warmup requests completed")],
                      figures={"num_requests": 4, "ttft_s": {"p99": 0.25, "mean": None},
                               "token_count_source": "engine", "goodput_rps": None},
                      origin_unix_s=1.7e9, origin_perf_counter_s=12.5, measure_start_s=0.5)
    flat = summary.to_dict()
    assert flat["schema_version"] == SCHEMA_VERSION == 1
    assert flat["ttft_s"]["p99"] == 0.25 and flat["validity"][0]["check"] == "warmup"
    assert Summary.from_dict(json.loads(json.dumps(flat))) == summary


def test_a_figure_of_the_wrong_type_is_malformed():
    with pytest.raises(MalformedSummary, match="output_throughput_tps is 'fast', not a number"):
        Summary.from_dict({"schema_version": 1, "output_throughput_tps": "fast"})
    with pytest.raises(MalformedSummary, match=r"ttft_s.p99 is 'x', not a number"):
        Summary.from_dict({"schema_version": 1, "ttft_s": {"p99": "x"}})
    with pytest.raises(MalformedSummary, match="not a JSON object"):
        Summary.from_dict([1, 2])


def test_a_summary_from_before_schema_versions_is_read_when_it_holds_the_counts(tmp_path):
    folder = write_realistic_run(tmp_path / "old", steps=False, telemetry=False)
    data = json.loads((folder / "summary.json").read_text())
    del data["schema_version"]
    (folder / "summary.json").write_text(json.dumps(data))
    summary = read_summary(folder)
    assert summary.schema_version is None
    assert summary.figures["num_completed"] == data["num_completed"]
    assert not load_run_folder(folder).summary_from_records  # the report reads its figures
    with pytest.raises(UnsupportedSummary, match="schema_version None, this llmperf reads 1"
                                                 r" \(no num_completed, num_failed"):
        Summary.from_dict({"num_requests": 3, "duration_s": 1.0})


@pytest.mark.parametrize("version", [2, "1", None])
def test_report_and_gate_refuse_another_version_with_one_line_and_exit_2(tmp_path, capsys,
                                                                          version):
    folder = write_realistic_run(tmp_path / "run", steps=False, telemetry=False)
    data = json.loads((folder / "summary.json").read_text())
    data["schema_version"] = version
    if version is None:  # and not a summary llmperf ever wrote
        data = {"schema_version": None, "throughput": 1}
    (folder / "summary.json").write_text(json.dumps(data))

    assert report_main([str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"schema_version {version!r}, this llmperf-report reads 1" in err

    baseline = tmp_path / "baseline.json"
    assert gate_main(["--baseline", str(baseline), "--current", str(folder), "--update",
                      "--metric", "output_throughput_tps"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"schema_version {version!r}, this gate reads 1" in err
    assert not baseline.exists()
