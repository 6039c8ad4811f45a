"""Lockstep pairs: two runs on one CPU whose engine steps take turns (llmperf.gate.lockstep).

The toy trees below hold an `engines/reference/engine.py` whose ReferenceEngine._step_locked
appends one line per step to a shared log, and an `llmperf/__main__.py` that steps it: the
log's order is the order the two processes stepped in.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf.gate import lockstep
from llmperf.gate.ab_figures import figure_named
from llmperf.gate.cli import main
from llmperf.gate.errors import GateError
from llmperf.gate.sides import Side
from tests.gate_fake_repo import MAIN, git, make_repo, read

ROOT = Path(__file__).resolve().parents[1]

ENGINE = '''
import os
class ReferenceEngine:
    def _step_locked(self, log, line):
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, (line + "\\n").encode())
        os.close(fd)
        return True
'''
# Steps the toy engine `steps=N` times, logging "<name> <i>"; `die_at=K` kills itself before
# step K, `hang_at=K` sleeps `hang_s` before it. Then writes a minimal run folder.
STEPS = '''
import os, signal, sys, time
from pathlib import Path
from engines.reference.engine import ReferenceEngine
args = dict(a.split("=", 1) for a in sys.argv[1:])
engine = ReferenceEngine()
for i in range(int(args["steps"])):
    if i == int(args.get("die_at", -1)):
        os.kill(os.getpid(), signal.SIGKILL)
    if i == int(args.get("hang_at", -1)):
        time.sleep(float(args["hang_s"]))
    engine._step_locked(args["log"], args.get("name", "{tag}") + " " + str(i))
'''
SUMMARY = '''
folder = Path(args["hydra.run.dir"])
folder.mkdir(parents=True)
(folder / "summary.json").write_text(
    '{"schema_version": 1, "valid": true, "validity": [], "interrupted": false}')
'''


def toy_tree(root: Path, engine: str = ENGINE, main_py: str = STEPS + SUMMARY) -> Path:
    for package in ("engines", "engines/reference", "llmperf"):
        (root / package).mkdir(parents=True, exist_ok=True)
        (root / package / "__init__.py").write_text("")
    (root / "engines/reference/engine.py").write_text(engine)
    (root / "llmperf/__main__.py").write_text(main_py)
    return root


def pair(tmp_path: Path, a: list[str], b: list[str], timeout_s: float = 60.0):
    root = toy_tree(tmp_path / "toy")
    log = tmp_path / "steps.log"
    sides = (Side("base", root, None, "A"), Side("head", root, None, "B"))
    overrides = ([f"log={log}", "name=A", *a], [f"log={log}", "name=B", *b])
    return lockstep.run_pair(*sides, overrides, (tmp_path / "out/a", tmp_path / "out/b"),
                             turn_timeout_s=timeout_s), log


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines()


def test_steps_alternate_while_both_live_and_the_survivor_runs_free(tmp_path):
    (jobs, turns), log = pair(tmp_path, ["steps=5"], ["steps=8"])
    # A holds the token first; after A's 5th step it ends, and B steps on alone
    assert lines(log) == ["A 0", "B 0", "A 1", "B 1", "A 2", "B 2", "A 3", "B 3", "A 4", "B 4",
                          "B 5", "B 6", "B 7"]
    assert turns[0] == {"steps": 5, "turns": 5, "waited_s": turns[0]["waited_s"], "free": None,
                        "free_at_step": None}
    assert turns[1]["steps"] == 8 and turns[1]["free"] == "the peer ended"
    assert turns[1]["free_at_step"] == 5  # at its 5th hand-over or its 6th wait
    assert [job.path.name for job in jobs] == ["a", "b"]


def test_a_peer_killed_mid_run_frees_the_other(tmp_path):
    with pytest.raises(GateError, match=r"the B run failed \(exit -9\)"):
        pair(tmp_path, ["steps=6"], ["steps=6", "die_at=3"])
    assert lines(tmp_path / "steps.log") == ["A 0", "B 0", "A 1", "B 1", "A 2", "B 2", "A 3",
                                             "A 4", "A 5"]
    assert json.loads((tmp_path / "out/a.lockstep.json").read_text())["free"] == "the peer ended"


def test_a_stuck_peer_holds_the_other_no_longer_than_the_turn_timeout(tmp_path):
    (_, turns), log = pair(tmp_path, ["steps=4"], ["steps=4", "hang_at=2", "hang_s=5"],
                           timeout_s=1.0)
    # A waits 1 s for B's third step, then steps alone: its last steps come before B wakes
    assert lines(log) == ["A 0", "B 0", "A 1", "B 1", "A 2", "A 3", "B 2", "B 3"]
    assert turns[0]["free"] == "no turn from the peer in 1 s" and turns[0]["free_at_step"] == 3
    assert 1.0 <= turns[0]["waited_s"] < 5
    assert lockstep.notes([{"base": turns[0], "head": turns[1]}]) == [
        "pair 1 base: left lockstep after 3 steps: no turn from the peer in 1 s"]


def test_code_without_the_step_method_names_sequential(tmp_path):
    older = ENGINE.replace("_step_locked", "step")
    root = toy_tree(tmp_path / "toy", engine=older)
    side = Side("base", root, None, "base old")
    with pytest.raises(GateError) as e:
        lockstep.run_pair(side, side, ([], []), (tmp_path / "a", tmp_path / "b"))
    assert str(e.value) == (
        "the base old run failed (exit 2): lockstep needs"
        " engines.reference.engine.ReferenceEngine._step_locked, which this code lacks"
        " (type object 'ReferenceEngine' has no attribute '_step_locked'); run with --sequential")


def commit_toy(repo: Path, tag: str, slowdown: float = 0.0) -> str:
    main_py = STEPS.replace("{tag}", tag) + MAIN.format(slowdown=slowdown, forward_passes=40,
                                                        noise=0.01, tag=tag)
    toy_tree(repo, main_py=main_py)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", tag)
    return git(repo, "rev-parse", "HEAD")


def test_ab_lockstep_takes_turns_pair_by_pair_and_leaves_wall_clock_figures_out(
        tmp_path, monkeypatch, capsys):
    repo = make_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    base = commit_toy(repo, "v1")
    commit_toy(repo, "v2", slowdown=0.10)
    log = tmp_path / "steps.log"
    assert main(["ab", "--base", base, "--head", "HEAD", "--pairs", "5", "--lockstep",
                 "--out", str(tmp_path / "ab"), "--", f"log={log}", "steps=3"]) == 1
    steps = lines(log)
    firsts = []
    for i in range(5):  # each pair: 3 steps a side, strictly alternating
        block = steps[6 * i:6 * i + 6]
        assert [s.split()[1] for s in block] == ["0", "0", "1", "1", "2", "2"]
        assert len({block[0].split()[0], block[1].split()[0]}) == 2
        firsts.append(block[0].split()[0])
    assert firsts == ["v1", "v2", "v1", "v2", "v1"]  # the first turn alternates
    record = read(tmp_path / "ab" / "ab.json")
    assert record["mode"] == "lockstep"
    assert [(p["base"]["turns"], p["head"]["turns"]) for p in record["turns"]] == [(3, 3)] * 5
    results = {r["figure"]: r for r in record["results"]}
    assert "output_throughput_tps" not in results and "e2e_s.median" not in results
    assert results["decode_step_p10_s"]["change"] == pytest.approx(0.10, abs=0.01)
    out = capsys.readouterr().out
    assert "  pair 2/5: base and head in lockstep, head first" in out
    assert "mode: lockstep (each pair's runs at once" in out
    assert "3-3 turns a run; output_throughput_tps, e2e_s.median left out)" in out
    # asked for by name, a wall-clock figure is refused in lockstep
    assert main(["ab", "--base", base, "--lockstep", "--figure", "e2e_s.median"]) == 2
    assert "e2e_s.median is read off the run's wall clock" in capsys.readouterr().err


def test_ab_lockstep_on_code_that_never_steps_the_engine_names_sequential(
        tmp_path, monkeypatch, capsys):
    repo = make_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    base = commit_toy(repo, "v1")
    assert main(["ab", "--base", base, "--pairs", "5", "--lockstep", "--out",
                 str(tmp_path / "ab"), "--", f"log={tmp_path / 'steps.log'}", "steps=0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith(
        "run took no turn in lockstep (is the engine engine=reference?); run with --sequential\n")


@pytest.mark.slow
def test_real_runs_in_lockstep_report_their_figures(tmp_path):
    """Two pairs of the real reference engine on a small offline workload, in lockstep."""
    side = Side("base", ROOT, None, "base"), Side("head", ROOT, None, "head")
    benchmark = ["scenario=offline", "model=tiny", "engine=reference", "engine.max_num_seqs=4",
                 "scenario.num_requests=4", "scenario.prompt_tokens.value=16",
                 "scenario.output_tokens.value=12", "scenario.validity.min_duration_s=0",
                 "scenario.validity.min_completed=4", "telemetry.enabled=false"]
    pairs, turns = lockstep.run_pairs(*side, benchmark, 2, tmp_path)
    step = figure_named("decode_step_p10_s")
    passes = figure_named("forward_passes")
    for (base, head), record in zip(pairs, turns, strict=True):
        assert step.read(base) > 0 and step.read(head) > 0
        assert passes.read(base) == passes.read(head) > 0  # the same seeded work on both
        # both sides stepped in turn until one ended; the other's last call may come after
        assert record["base"]["turns"] > passes.read(base)
        assert abs(record["base"]["turns"] - record["head"]["turns"]) <= 1
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [
        "pair0-base", "pair0-head", "pair1-base", "pair1-head"]


def test_calibrate_in_lockstep_pairs_each_condition_with_its_own_base_run(
        tmp_path, monkeypatch, capsys):
    repo = make_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    commit_toy(repo, "v1")
    out, log = tmp_path / "cal", tmp_path / "steps.log"
    args = ["--pairs", "5", "--trials", "4", "--slowdowns", "20%", "--tolerance", "5%"]
    assert main(["calibrate", "--lockstep", "--rounds", "5", *args, "--out", str(out), "--",
                 f"log={log}", "steps=2"]) == 0
    report = read(out / "calibrate.json")
    assert report["mode"] == "lockstep" and report["rounds"] == 5
    assert report["conditions"]["+20%"]["flagged"] == 4
    assert report["conditions"]["+20%"]["change"] == pytest.approx(0.20, abs=0.01)
    assert report["conditions"]["A/A"]["flagged"] == 0
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("round1-")
                  and p.is_dir()) == ["round1-aa", "round1-aa-a", "round1-slow20", "round1-slow20-a"]
    assert len(lines(log)) == 5 * 2 * 2 * 2  # rounds x conditions x runs x steps
    # judged again from the folder: the same rounds, the same verdicts
    assert main(["calibrate", "--from", str(out), *args]) == 0
    again = read(out / "calibrate.json")
    assert again["mode"] == "lockstep" and again["conditions"] == report["conditions"]
    assert "mode: lockstep; machine: " in capsys.readouterr().out
