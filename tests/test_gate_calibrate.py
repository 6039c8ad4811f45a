"""`llmperf-gate calibrate` on a throwaway repository whose runs carry 1% noise."""

from __future__ import annotations

import pytest

from llmperf.gate.cli import main
from tests.gate_fake_repo import commit_version, make_repo, read


def test_calibration_counts_false_alarms_and_detections(tmp_path, monkeypatch, capsys):
    repo = make_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    commit_version(repo, "v1", noise=0.01)
    out = tmp_path / "cal"
    assert main(["calibrate", "--rounds", "8", "--pairs", "6", "--trials", "20",
                 "--slowdowns", "2%,10%,20%", "--tolerance", "5%", "--out", str(out)]) == 0
    report = read(out / "calibrate.json")
    rows = report["conditions"]
    assert list(rows) == ["A/A", "+2%", "+10%", "+20%"]
    assert rows["A/A"]["flagged"] == 0  # a 5% tolerance sits far above 1% noise
    assert rows["+2%"]["flagged"] == 0  # a change under the tolerance is never a regression
    assert rows["+10%"]["flagged"] == 20 and rows["+20%"]["flagged"] == 20
    assert rows["+10%"]["change"] == pytest.approx(0.10, abs=0.01)
    assert rows["+20%"]["change"] == pytest.approx(0.20, abs=0.01)
    assert report["smallest_detected"] == pytest.approx(0.10)
    # a run's figure is the median of 40 steps with +-1% noise each: its spread is far smaller
    assert 0 < report["aa_log_ratio_std"] < 0.01
    assert 0.05 < report["smallest_detected_model"] < 0.08
    text = capsys.readouterr().out
    assert "smallest injected slowdown detected at 95% power: 10%" in text
    # 8 rounds x 5 conditions, the order rotating: round 1 starts with the A/A run
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("round1-")) == [
        "round1-a", "round1-aa", "round1-slow10", "round1-slow2", "round1-slow20"]


def test_calibration_refuses_a_counter_or_too_few_rounds(tmp_path, monkeypatch, capsys):
    repo = make_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    commit_version(repo, "v1")
    assert main(["calibrate", "--figure", "forward_passes"]) == 2
    assert "is a counter" in capsys.readouterr().err
    assert main(["calibrate", "--rounds", "5", "--pairs", "6"]) == 2
    assert "must be between 5 and --rounds 5" in capsys.readouterr().err


def test_a_calibration_cut_short_is_judged_from_its_complete_rounds(tmp_path, monkeypatch):
    repo = make_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    commit_version(repo, "v1", noise=0.01)
    out = tmp_path / "cal"
    assert main(["calibrate", "--rounds", "6", "--pairs", "5", "--trials", "4",
                 "--slowdowns", "20%", "--out", str(out)]) == 0
    first = read(out / "calibrate.json")
    for run in out.glob("round5-*"):  # the last round lost one run
        if run.name.endswith("slow20"):
            (run / "summary.json").unlink()
    assert main(["calibrate", "--from", str(out), "--pairs", "5", "--trials", "4",
                 "--slowdowns", "20%"]) == 0
    again = read(out / "calibrate.json")
    assert again["rounds"] == 5 and first["rounds"] == 6
    assert again["conditions"]["+20%"]["flagged"] == 4
    # two calibrations judged as one: their complete rounds add up
    assert main(["calibrate", "--from", str(out), "--from", str(out), "--pairs", "8",
                 "--trials", "4", "--slowdowns", "20%"]) == 0
    assert read(out / "calibrate.json")["rounds"] == 10
