import subprocess
import sys

import pytest

from llmperf.report.cli import main
from tests.test_report_support import write_realistic_run, write_realistic_sweep


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return [write_realistic_run(root / name, steps=False, telemetry=False, overrides=[o])
            for name, o in (("a", "engine.batching=continuous"), ("b", "engine.batching=static"))]


def test_one_run_folder_rebuilds_its_report(runs, capsys):
    assert main([str(runs[0])]) == 0
    assert (runs[0] / "report.html").is_file()
    assert capsys.readouterr().out.strip() == f"report: {runs[0] / 'report.html'}"


def test_a_sweep_folder_rebuilds_its_comparison(tmp_path, capsys):
    sweep = write_realistic_sweep(tmp_path / "sweep")
    assert main([str(sweep)]) == 0
    assert (sweep / "report.html").is_file()
    assert len((sweep / "sweep.csv").read_text().splitlines()) == 1 + 4


def test_several_run_folders_make_one_comparison_page(runs, tmp_path):
    out = tmp_path / "cmp"
    assert main([str(runs[0]), str(runs[1]), "--out", str(out)]) == 0
    html = (out / "report.html").read_text()
    assert "Comparison of 2 runs" in html and (out / "plots" / "compare_cdf.png").is_file()


@pytest.mark.parametrize(("args", "message"), [
    (["{tmp}/missing"], "{tmp}/missing: no such folder"),
    (["{tmp}/file.txt"], "{tmp}/file.txt: not a folder; give a run or sweep folder"),
    (["{tmp}"], "{tmp}: neither a run folder (summary.json or requests.jsonl) nor a sweep"
                " folder (multirun.yaml, or two run subfolders or more)"),
    (["{run}", "--out", "{tmp}/x"], "--out is for comparisons of several runs; a run or sweep"
                                    " report is written in its own folder"),
    (["{run}", "{sweep}"], "{sweep} is a sweep folder; compare run folders (a sweep's jobs),"
                           " or give the sweep folder alone"),
    (["{run}", "{other}", "-o", "{run}"], "{run} is a run folder: the comparison would replace"
                                          " its report and plots; give another --out"),
    (["{run}", "{other}", "-o", "{sweep}"], "{sweep} is a sweep folder: the comparison would"
                                            " replace its report and plots; give another --out"),
])
def test_bad_paths_are_one_line_and_exit_2(tmp_path, runs, capsys, args, message):
    (tmp_path / "file.txt").write_text("x")
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    write_realistic_run(sweep / "job", steps=False, telemetry=False)
    names = {"tmp": tmp_path, "run": runs[0], "other": runs[1], "sweep": sweep}
    assert main([a.format(**names) for a in args]) == 2
    err = capsys.readouterr().err
    assert err == f"llmperf-report: error: {message.format(**names)}\n"


def test_a_refused_comparison_leaves_the_run_report_and_plots_alone(runs, capsys):
    assert main([str(runs[0])]) == 0
    before = {p.name: p.stat().st_mtime_ns for p in runs[0].rglob("*")}
    assert main([str(runs[0]), str(runs[1]), "-o", str(runs[0])]) == 2
    assert {p.name: p.stat().st_mtime_ns for p in runs[0].rglob("*")} == before
    assert "plots" in before and "report.html" in before


def test_module_entry_point_exits_2_without_a_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "llmperf.report", str(tmp_path / "nope")],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr == f"llmperf-report: error: {tmp_path / 'nope'}: no such folder\n"
    no_args = subprocess.run([sys.executable, "-m", "llmperf.report"], capture_output=True,
                             text=True)
    assert no_args.returncode == 2 and len(no_args.stderr.splitlines()) == 1
