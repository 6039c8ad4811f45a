import json

import pytest

from llmperf.report.errors import ReportError
from llmperf.report.folder import is_sweep_folder, load_run_folder
from llmperf.report.run import build_run_report
from tests.test_report_support import write_realistic_run, write_realistic_sweep


def test_a_full_run_folder_loads_every_file(tmp_path):
    run = load_run_folder(write_realistic_run(tmp_path / "run", overrides=["engine=reference"]))
    assert run.missing_files == []
    assert run.notes == []
    assert len(run.records) == 63  # 60 measured + 3 warmup
    assert run.steps and run.telemetry is not None and "power_w" in run.telemetry.columns
    assert run.overrides == ["engine=reference"]
    assert run.environment["git"]["commit"] == "8c234bb"
    assert not run.interrupted and not run.summary_from_records


def test_optional_files_may_be_missing(tmp_path):
    folder = write_realistic_run(tmp_path / "run", steps=False, telemetry=False)
    (folder / "config.yaml").unlink()
    (folder / "environment.json").unlink()
    run = load_run_folder(folder)
    assert (run.steps, run.telemetry, run.config_yaml, run.environment) == (None, None, None, None)
    assert run.missing_files == ["steps.jsonl", "telemetry.csv", "config.yaml", "environment.json"]


def test_a_run_killed_before_its_summary_is_read_from_its_records(tmp_path):
    folder = write_realistic_run(tmp_path / "run", summary=False, interrupted=True)
    with (folder / "requests.jsonl").open("a") as f:
        f.write('{"id": "req-99", "arrival_s": 3.1, "disp')  # the write the kill cut short
    run = load_run_folder(folder)
    assert run.summary_from_records and run.interrupted
    assert run.summary["num_requests"] == len([r for r in run.records if not r["warmup"]])
    assert any("skipped 1 unreadable line" in n for n in run.notes)
    assert any("summary.json is missing" in n for n in run.notes)


def test_a_request_line_without_its_times_counts_as_unreadable(tmp_path):
    folder = write_realistic_run(tmp_path / "run", summary=False)
    with (folder / "requests.jsonl").open("a") as f:
        f.write(json.dumps({"id": "req-x", "arrival_s": 1.0, "output_tokens": 0}) + "\n")
        f.write(json.dumps({"id": "req-y", "arrival_s": 1.0, "dispatch_s": 1.0,
                            "end_s": "soon"}) + "\n")
    run = load_run_folder(folder)
    assert len(run.records) == 63 and run.summary["num_requests"] == 60
    assert "requests.jsonl: skipped 2 unreadable lines (a write cut short?)" in run.notes
    assert build_run_report(folder).is_file()


def test_corrupt_summary_falls_back_to_records_and_says_so(tmp_path):
    folder = write_realistic_run(tmp_path / "run")
    (folder / "summary.json").write_text('{"schema_version": 1, "num_')
    run = load_run_folder(folder)
    assert run.summary_from_records
    assert any("not valid JSON" in n for n in run.notes)


def test_not_a_run_folder_is_one_clear_error(tmp_path):
    with pytest.raises(ReportError, match="no such folder"):
        load_run_folder(tmp_path / "missing")
    with pytest.raises(ReportError, match="not a run folder"):
        load_run_folder(tmp_path)


def test_steps_are_read_on_the_records_clock_as_the_harness_writes_them(tmp_path):
    folder = write_realistic_run(tmp_path / "run")
    written = [json.loads(line)["start_s"] for line in (folder / "steps.jsonl").open()]
    run = load_run_folder(folder)
    assert [s["start_s"] for s in run.steps] == written
    assert written[:2] == pytest.approx([0.0, 0.01])


def test_sweep_folders_are_told_from_run_folders_and_from_folders_of_other_things(tmp_path):
    sweep = write_realistic_sweep(tmp_path / "sweep")
    assert is_sweep_folder(sweep)
    assert not is_sweep_folder(sweep / "engine.batching=static,scenario.arrival.rate_rps=4")
    lone = tmp_path / "scratch"
    write_realistic_run(lone / "one-run")
    (lone / "notes.txt").write_text("not a run")
    assert not is_sweep_folder(lone)  # one run among other things: not a sweep
    write_realistic_run(lone / "another-run")
    assert is_sweep_folder(lone)  # two runs: compared as a sweep


def test_summary_that_is_not_an_object_is_reported(tmp_path):
    folder = write_realistic_run(tmp_path / "run")
    (folder / "summary.json").write_text(json.dumps([1, 2]))
    run = load_run_folder(folder)
    assert run.summary_from_records
    assert any("not a JSON object" in n for n in run.notes)
