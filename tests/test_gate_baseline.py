import json
import subprocess
from pathlib import Path

import pytest

from llmperf.gate.baseline import Baseline, provenance, provenance_mismatches
from llmperf.gate.cli import main
from llmperf.gate.errors import GateError
from llmperf.gate.runs import load_jobs
from tests.test_gate_support import summary, write_run

ROOT = Path(__file__).resolve().parents[1]


def _baseline(**changes) -> dict:
    d = {"kind": "llmperf-gate-baseline", "schema_version": 1, "created": "", "source": {},
         "metrics": {"output_throughput_tps": {"tolerance": "-5%", "values": [100.0]}}}
    d.update(changes)
    return d


@pytest.mark.parametrize("changes, message", [
    ({"kind": "something-else"}, "not an llmperf-gate baseline"),
    ({"schema_version": 2}, "baseline schema_version 2, this gate reads 1"),
    ({"metrics": [1, 2]}, "'metrics' must map metric names"),
    ({"metrics": {"output_throughput_tps": {"tolerance": "-5%", "values": []}}},
     "needs a non-empty list of numbers"),
    ({"metrics": {"tokens_per_s": {"tolerance": "-5%", "values": [1.0]}}},
     "unknown metric 'tokens_per_s'"),
    ({"metrics": {"ttft_s.p99": {"tolerance": "-5%", "values": [1.0]}}},
     "points the wrong way"),
    ({"metrics": {"output_throughput_tps": {"tolerance": "-5%", "values": 5}}},
     "needs a non-empty list of numbers"),
    ({"metrics": {"output_throughput_tps": {"tolerance": "-5%", "values": [True, 1.0]}}},
     "needs a non-empty list of numbers"),
    ({"metrics": {"output_throughput_tps": {"tolerance": "-5%", "values": "100"}}},
     "needs a non-empty list of numbers"),
    ({"source": []}, "'source' must be an object"),
])
def test_foreign_or_broken_baselines_are_schema_errors(tmp_path, changes, message):
    path = tmp_path / "b.json"
    path.write_text(json.dumps(_baseline(**changes)))
    with pytest.raises(GateError, match=f"^baseline {path}: .*{message}"):
        Baseline.load(path)


@pytest.mark.parametrize("changes", [
    {"metrics": {"output_throughput_tps": {"tolerance": "-5%", "values": 5}}},
    {"source": []},
])
def test_a_malformed_baseline_is_one_line_and_exit_2(tmp_path, capsys, changes):
    path = tmp_path / "b.json"
    path.write_text(json.dumps(_baseline(**changes)))
    run = write_run(tmp_path / "run", summary())
    assert main(["--baseline", str(path), "--current", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"llmperf-gate: error: baseline {path}: ") and err.count("\n") == 1


def test_baseline_survives_a_save_and_load(tmp_path):
    original = Baseline.from_dict(_baseline(source={"git_commit": "abc"}, created="2025-01-01"))
    original.save(tmp_path / "deep" / "b.json")
    loaded = Baseline.load(tmp_path / "deep" / "b.json")
    assert loaded.to_dict() == original.to_dict()
    assert loaded.to_dict()["metrics"]["output_throughput_tps"]["direction"] == "higher"


def test_origin_falls_back_to_the_checkout_commit(tmp_path, monkeypatch):
    run = write_run(tmp_path / "run", summary())
    monkeypatch.chdir(ROOT)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=ROOT).stdout.strip()
    source = provenance([(run, load_jobs(run))])
    assert source["git_commit"] == head
    assert source["hardware"] == {"name": "cpu", "kind": "cpu"}
    assert "jobs" not in source


def _environment(folder: Path, cpu_model: str, dirty: bool = False) -> None:
    (folder / "environment.json").write_text(json.dumps({
        "cpu_count": 2, "cpu_model": cpu_model,
        "torch": {"version": "2.13.0+cpu", "num_threads": 2, "devices": []},
        "git": {"commit": "0123456789abcdef0123", "branch": "main", "dirty": dirty}}))


def test_a_different_model_is_warned_about_and_an_invalid_run_fails_with_its_reasons(
        tmp_path, capsys):
    baseline = tmp_path / "b.json"
    main(["--baseline", str(baseline), "--current", str(write_run(tmp_path / "a", summary())),
          "--update", "--metric", "output_throughput_tps:-5%"])
    other = write_run(tmp_path / "b", summary(model={"name": "llama-3.2-1b"}, valid=False,
                                              validity=[{"check": "min_completed", "ok": False,
                                                         "detail": "3 < 10"}]))
    assert provenance_mismatches(Baseline.load(baseline).source, load_jobs(other)[0]) == [
        "the baseline's model is 'tiny', the current run's is 'llama-3.2-1b'"]
    capsys.readouterr()
    assert main(["--baseline", str(baseline), "--current", str(other)]) == 1
    out = capsys.readouterr().out
    assert f"FAIL: {other}: the run is not valid: min_completed (3 < 10)" in out
    assert "--allow-invalid" in out

    md = tmp_path / "gate.md"
    assert main(["--baseline", str(baseline), "--current", str(other), "--markdown", str(md),
                 "--allow-invalid"]) == 0
    out = capsys.readouterr().out
    assert f"warning: {other}: the run is not valid: min_completed (3 < 10)" in out
    assert "warning: the baseline's model is 'tiny', the current run's is 'llama-3.2-1b'" in out
    assert "> ⚠️ the baseline's model is 'tiny'" in md.read_text()


def test_the_baseline_records_where_it_was_measured_and_warns_on_another_cpu(tmp_path, capsys):
    base_run = write_run(tmp_path / "a", summary())
    _environment(base_run, "Intel(R) Xeon(R) Processor")
    baseline = tmp_path / "b.json"
    assert main(["--baseline", str(baseline), "--current", str(base_run), "--update",
                 "--metric", "output_throughput_tps:-5%"]) == 0
    machine = json.loads(baseline.read_text())["source"]["machine"]
    assert machine == {"git_commit": "0123456789abcdef0123", "git_dirty": False,
                       "torch": "2.13.0+cpu", "device": "Intel(R) Xeon(R) Processor",
                       "threads": 2}
    other = write_run(tmp_path / "c", summary())
    _environment(other, "AMD EPYC 9654")
    capsys.readouterr()
    assert main(["--baseline", str(baseline), "--current", str(other)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert ("baseline: commit 0123456789ab, torch 2.13.0+cpu, Intel(R) Xeon(R) Processor,"
            " 2 threads") in out
    assert "current:  commit 0123456789ab, torch 2.13.0+cpu, AMD EPYC 9654, 2 threads" in out
    assert ("warning: the baseline's device is 'Intel(R) Xeon(R) Processor', the current run's"
            " is 'AMD EPYC 9654': times are not comparable across machines") in out


def test_update_refuses_runs_from_a_dirty_tree(tmp_path, capsys):
    run = write_run(tmp_path / "a", summary())
    _environment(run, "Intel(R) Xeon(R) Processor", dirty=True)
    args = ["--baseline", str(tmp_path / "b.json"), "--current", str(run), "--update",
            "--metric", "output_throughput_tps:-5%"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "uncommitted changes" in err
    assert main([*args, "--allow-dirty"]) == 0
    assert json.loads((tmp_path / "b.json").read_text())["source"]["machine"]["git_dirty"]


def test_the_gate_writes_the_current_medians_for_the_history(tmp_path):
    baseline = tmp_path / "b.json"
    runs = [write_run(tmp_path / f"r{i}", summary(output_throughput_tps=tps))
            for i, tps in enumerate((90.0, 100.0, 120.0))]
    for run in runs:
        _environment(run, "Intel(R) Xeon(R) Processor")
    currents = [arg for run in runs for arg in ("--current", str(run))]
    main(["--baseline", str(baseline), *currents, "--update", "--metric", "output_throughput_tps:-5%"])
    assert main(["--baseline", str(baseline), *currents, "--figures", str(tmp_path / "f.json")]) == 0
    figures = json.loads((tmp_path / "f.json").read_text())
    assert figures["commit"] == "0123456789abcdef0123" and figures["dirty"] is False
    assert figures["figures"] == {"output_throughput_tps": 100.0}


def test_of_several_baselines_the_one_recorded_on_this_device_gates(tmp_path, capsys):
    xeon, epyc = tmp_path / "xeon.json", tmp_path / "epyc.json"
    for path, cpu, tps in ((xeon, "Intel(R) Xeon(R) Processor", 100.0), (epyc, "AMD EPYC", 140.0)):
        run = write_run(tmp_path / path.stem, summary(output_throughput_tps=tps))
        _environment(run, cpu)
        assert main(["--baseline", str(path), "--current", str(run), "--update",
                     "--metric", "output_throughput_tps:-5%"]) == 0
    on_epyc = write_run(tmp_path / "now", summary(output_throughput_tps=120.0))
    _environment(on_epyc, "AMD EPYC")
    capsys.readouterr()
    # 120 is 14% under the EPYC baseline (a regression) though 20% over the Xeon one
    assert main(["--baseline", str(xeon), str(epyc), "--current", str(on_epyc)]) == 1
    out = capsys.readouterr().out
    assert "baseline: commit 0123456789ab, torch 2.13.0+cpu, AMD EPYC, 2 threads" in out
    assert "not comparable" not in out

    elsewhere = write_run(tmp_path / "elsewhere", summary(output_throughput_tps=120.0))
    _environment(elsewhere, "Ampere Altra")
    assert main(["--baseline", str(xeon), "--baseline", str(epyc), "--current", str(elsewhere)]) == 0
    out = capsys.readouterr().out
    assert (f"warning: no baseline of 2 was recorded on 'Ampere Altra' (they were:"
            f" 'Intel(R) Xeon(R) Processor', 'AMD EPYC'); gated against {xeon}") in out
    assert "the baseline's device is 'Intel(R) Xeon(R) Processor'" in out

    assert main(["--baseline", str(xeon), str(epyc), "--current", str(elsewhere), "--update"]) == 2
    assert "give the one --baseline FILE to write" in capsys.readouterr().err
