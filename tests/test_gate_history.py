"""`llmperf-gate history`: CI appends figures per commit; the command plots one across commits."""

from __future__ import annotations

import csv
import json

from matplotlib.image import imread

from llmperf.gate.cli import main


def figures(tmp_path, commit: str, date: str, **values: float):
    path = tmp_path / f"{commit}.json"
    path.write_text(json.dumps({"commit": commit, "date": date, "figures": values}))
    return str(path)


def test_appended_figures_are_plotted_across_commits(tmp_path, capsys):
    history = tmp_path / "history.csv"
    for commit, date, step in (("aaaa1111", "2026-12-01", 0.0100), ("bbbb2222", "2026-12-02", 0.0110),
                               ("bbbb2222", "2026-12-02", 0.0112), ("cccc3333", "2026-12-03", 0.0101)):
        assert main(["history", "--csv", str(history), "--append",
                     figures(tmp_path, commit, date, decode_step_p10_s=step, forward_passes=96.0)]) == 0
    with history.open() as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["date", "commit", "figure", "value"]
    assert rows[1:3] == [["2026-12-01", "aaaa1111", "decode_step_p10_s", "0.01"],
                         ["2026-12-01", "aaaa1111", "forward_passes", "96.0"]]
    assert len(rows) == 1 + 4 * 2

    out = tmp_path / "plots"
    assert main(["history", "decode_step_p10_s", "--csv", str(history), "--out", str(out)]) == 0
    assert "decode_step_p10_s: 4 points over 3 commits" in capsys.readouterr().out
    image = imread(out / "decode_step_p10_s.png")
    assert image.shape[0] > 200 and image.shape[1] > 600
    page = (out / "decode_step_p10_s.html").read_text()
    assert "<img src='decode_step_p10_s.png'" in page
    assert page.index("cccc3333") < page.index("aaaa1111")  # newest first
    assert "0.0112" in page


def test_history_errors_are_one_line_and_exit_2(tmp_path, capsys):
    history = tmp_path / "history.csv"
    assert main(["history", "decode_step_p10_s", "--csv", str(history)]) == 2
    assert "history not found" in capsys.readouterr().err
    main(["history", "--csv", str(history), "--append", figures(tmp_path, "aaaa", "", x=1.0)])
    assert main(["history", "decode_step_p10_s", "--csv", str(history)]) == 2
    err = capsys.readouterr().err
    assert "no figure 'decode_step_p10_s'" in err and "it holds: x" in err and err.count("\n") == 1


def test_figures_from_a_dirty_tree_are_refused(tmp_path, capsys):
    path = tmp_path / "f.json"
    path.write_text(json.dumps({"commit": "aaaa", "dirty": True, "figures": {"x": 1.0}}))
    assert main(["history", "--csv", str(tmp_path / "h.csv"), "--append", str(path)]) == 2
    assert "uncommitted changes" in capsys.readouterr().err
    assert not (tmp_path / "h.csv").exists()
