"""`llmperf-gate ab` on a throwaway repository: each side runs its own commit, interleaved."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llmperf.gate.checkout import side_trees
from llmperf.gate.cli import main
from tests.gate_fake_repo import commit_version, git, make_repo, order, read

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ["--figure", "decode_step_p10_s", "--figure", "output_throughput_tps",
           "--figure", "forward_passes", "--figure", "kv_blocks_peak"]


@pytest.fixture
def repo(tmp_path, monkeypatch):
    repo = make_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    return repo


def ab(tmp_path, *args: str) -> int:
    """One `ab` run into a new tmp_path/ab (an earlier one's folder is renamed away)."""
    out = tmp_path / "ab"
    if out.exists():
        out.rename(tmp_path / f"ab-{len(list(tmp_path.glob('ab*')))}")
    return main(["ab", *args, "--out", str(out), *FIGURES, "--",
                 f"order_log={tmp_path / 'order.log'}"])


def test_a_ten_percent_slower_head_fails_and_the_sides_alternate(repo, tmp_path, capsys):
    base = commit_version(repo, "v1")
    commit_version(repo, "v2", slowdown=0.10)
    assert ab(tmp_path, "--base", base, "--head", "HEAD", "--pairs", "6") == 1
    out = capsys.readouterr().out
    # output tok/s = 4 tokens / step time: -9.1%, past -5% too
    assert "FAIL: 2 of 4 figures regressed (decode_step_p10_s, output_throughput_tps)" in out
    results = {r["figure"]: r for r in read(tmp_path / "ab" / "ab.json")["results"]}
    assert results["decode_step_p10_s"]["change"] == pytest.approx(0.10, abs=0.01)
    assert results["decode_step_p10_s"]["low"] > 0.05
    assert results["decode_step_p10_s"]["verdict"] == "REGRESSION"
    assert results["output_throughput_tps"]["change"] == pytest.approx(1 / 1.1 - 1, abs=0.01)
    assert results["forward_passes"]["verdict"] == "pass"
    assert results["forward_passes"]["base"] == [40.0] * 6  # the warmup step is left out
    figures = read(tmp_path / "ab" / "figures.json")
    assert figures["commit"] == "v2" and figures["dirty"] is False
    assert figures["figures"]["ab.forward_passes"] == 40.0
    assert figures["figures"]["ab.decode_step_p10_s.change"] == pytest.approx(0.10, abs=0.01)
    # A B, B A, A B ...: base=v1, head=v2, each from its own commit
    assert order(tmp_path / "order.log") == [
        "v1", "pair0-base", "v2", "pair0-head", "v2", "pair1-head", "v1", "pair1-base",
        "v1", "pair2-base", "v2", "pair2-head", "v2", "pair3-head", "v1", "pair3-base",
        "v1", "pair4-base", "v2", "pair4-head", "v2", "pair5-head", "v1", "pair5-base"]
    # Each run on one torch thread by default (--threads), as the runs' provenance says.
    assert "base: base " in out and "Fake CPU, 1 thread" in out
    assert git(repo, "worktree", "list").count("\n") == 0  # the temporary worktrees are gone


def test_threads_zero_leaves_torch_its_default(repo, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    base = commit_version(repo, "v1")
    assert ab(tmp_path, "--base", base, "--head", "HEAD", "--pairs", "5", "--threads", "0") == 0
    assert "Fake CPU, 2 threads" in capsys.readouterr().out


def test_the_same_code_passes_and_a_counter_that_moves_fails_exactly(repo, tmp_path, capsys):
    base = commit_version(repo, "v1")
    assert ab(tmp_path, "--base", base, "--pairs", "5") == 0
    assert "PASS: no regression in 4 figures" in capsys.readouterr().out
    commit_version(repo, "v2", forward_passes=41)
    assert ab(tmp_path, "--base", base, "--pairs", "5") == 1
    results = {r["figure"]: r for r in read(tmp_path / "ab" / "ab.json")["results"]}
    assert results["forward_passes"]["change"] == pytest.approx(1 / 40)
    assert results["forward_passes"]["verdict"] == "REGRESSION"
    assert results["decode_step_p10_s"]["verdict"] == "pass"


def test_the_working_tree_is_the_default_head_uncommitted_changes_included(repo, tmp_path, capsys):
    base = commit_version(repo, "v1")
    main_py = repo / "llmperf" / "__main__.py"
    main_py.write_text(main_py.read_text().replace("SLOWDOWN = 0.0", "SLOWDOWN = 0.2"))
    # a relative --out, as .ci/run gives it: both sides' runs land in it, not in their trees
    assert main(["ab", "--base", base, "--pairs", "5", "--out", "reports/ci/ab", *FIGURES]) == 1
    assert sorted(p.name for p in (repo / "reports/ci/ab").iterdir())[:2] == [
        "ab.json", "figures.json"]
    (repo / "reports/ci/ab").rename(tmp_path / "ab")
    out = capsys.readouterr().out
    assert "head (working tree at" in out and "+ uncommitted changes" in out
    results = {r["figure"]: r for r in read(tmp_path / "ab" / "ab.json")["results"]}
    assert results["decode_step_p10_s"]["change"] == pytest.approx(0.20, abs=0.015)


def test_both_sides_run_from_sibling_trees_made_alike_the_working_trees_state_copied(repo):
    base = commit_version(repo, "v1")
    (repo / ".gitignore").write_text("ignored.txt\n")
    (repo / "gone.txt").write_text("tracked, then deleted\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "files")
    main_py = repo / "llmperf" / "__main__.py"
    main_py.write_text(main_py.read_text() + "# changed\n")
    (repo / "llmperf" / "new.py").write_text("untracked = True\n")
    (repo / "ignored.txt").write_text("ignored\n")
    (repo / "gone.txt").unlink()
    with side_trees(repo, base, None) as (base_tree, head_tree):
        assert base_tree.parent == head_tree.parent
        assert len(str(base_tree)) == len(str(head_tree))  # one environment size on both sides
        assert (head_tree / "llmperf" / "__main__.py").read_text() == main_py.read_text()
        assert (head_tree / "llmperf" / "new.py").read_text() == "untracked = True\n"
        assert not (head_tree / "gone.txt").exists() and not (head_tree / "ignored.txt").exists()
        assert "# changed" not in (base_tree / "llmperf" / "__main__.py").read_text()
        assert not (base_tree / "gone.txt").exists()  # the base is v1, before the file came
    assert not base_tree.parent.exists()
    assert git(repo, "worktree", "list").count("\n") == 0


def test_an_invalid_run_fails_with_its_reason_unless_allowed(repo, tmp_path, capsys):
    base = commit_version(repo, "v1")
    args = ["ab", "--base", base, "--pairs", "5", *FIGURES, "--", "valid=false"]
    assert main([*args[:1], "--out", str(tmp_path / "ab1"), *args[1:]]) == 1
    assert "FAIL: " in capsys.readouterr().out
    assert main([*args[:1], "--out", str(tmp_path / "ab2"), "--allow-invalid", *args[1:]]) == 0
    assert "the run is not valid: min_completed (3 < 32)" in capsys.readouterr().out


def test_the_base_comes_from_the_baseline_or_falls_back_clearly(repo, tmp_path, capsys):
    base = commit_version(repo, "v1")
    commit_version(repo, "v2")
    baseline = tmp_path / "b.json"
    record = {"kind": "llmperf-gate-baseline", "schema_version": 1, "source": {
        "machine": {"git_commit": base}}, "metrics": {"output_throughput_tps": {
            "tolerance": "-5%", "values": [1.0]}}}
    baseline.write_text(json.dumps(record))
    assert ab(tmp_path, "--baseline", str(baseline), "--pairs", "5") == 0
    assert f"base {base} ({base[:12]})" in capsys.readouterr().out
    record["source"]["machine"]["git_commit"] = "f" * 40
    baseline.write_text(json.dumps(record))
    assert ab(tmp_path, "--baseline", str(baseline), "--pairs", "5") == 0
    out = capsys.readouterr().out
    assert f"warning: {baseline} was recorded at ffffffffffff, which this clone lacks;" \
           " comparing against HEAD~1 instead" in out


@pytest.mark.parametrize("args, message", [
    (["--base", "no-such-ref"], "unknown git ref 'no-such-ref'"),
    (["--base", "HEAD", "--figure", "ttft"], "unknown A/B figure 'ttft'"),
    (["--baseline", "missing.json"], "baseline not found: missing.json"),
    (["--base", "HEAD", "--pairs", "4"], "needs at least 5"),
    (["--base", "HEAD", "--threads", "-1"], "--threads -1 must be >= 0"),
    (["--base", "HEAD", "--out", "."], ". already exists and is not empty"),
])
def test_usage_errors_are_one_line_and_exit_2(repo, tmp_path, capsys, args, message):
    commit_version(repo, "v1")
    assert main(["ab", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_figure_the_runs_do_not_report_is_left_out_with_a_warning(repo, tmp_path, capsys):
    base = commit_version(repo, "v1")
    assert main(["ab", "--base", base, "--pairs", "5", "--out", str(tmp_path / "ab")]) == 0
    out = capsys.readouterr().out
    assert "warning: decode_cpu_p10_s left out: " in out and "lacks 'cpu_s'" in out
    assert "warning: bytes_per_token left out: " in out  # no model accounting in these runs
    assert "PASS: no regression in 6 figures" in out  # 9 less cpu, bytes, FLOPs


def test_a_terminated_ab_removes_its_worktrees(repo, tmp_path):
    base = commit_version(repo, "v1")
    # the gate's file as a script: `-m` would put the fake repo's own llmperf first on sys.path
    proc = subprocess.Popen([sys.executable, str(ROOT / "llmperf/gate/__main__.py"), "ab", "--base", base,
                             "--pairs", "5", "--out", str(tmp_path / "ab"), "--", "sleep=2"],
                            cwd=repo, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while "pair 1/5" not in (line := proc.stdout.readline()) and time.monotonic() < deadline:
        assert line, proc.stderr.read()
    assert git(repo, "worktree", "list").count("\n") == 2  # the base's and the head's, while it runs
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    assert git(repo, "worktree", "list").count("\n") == 0
