"""The callback wired into a real Hydra multirun: a tiny app that writes a summary.json per
job, swept 2x2 with the basic launcher and with submitit's local executor (the one a Slurm
sweep swaps for `hydra/launcher=submitit_slurm`)."""

import csv
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

APP = '''
import json
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig


@hydra.main(config_path=".", config_name="config", version_base="1.3")
def main(cfg):
    """A stand-in benchmark: static batching is 4x slower than continuous."""
    slowdown = {"static": 4.0, "continuous": 1.0}[cfg.batching]
    tps = 100.0 * cfg.rate / slowdown
    summary = {
        "schema_version": 1, "valid": True, "interrupted": False,
        "output_throughput_tps": tps, "goodput_rps": cfg.rate / slowdown,
        "ttft_s": {"median": 0.05 * slowdown * cfg.rate, "p99": 0.2 * slowdown * cfg.rate},
        "tpot_s": {"median": 0.01 * slowdown, "p99": 0.02 * slowdown},
        "usd_per_1m_tokens": 3.5 / tps,
    }
    out = Path(HydraConfig.get().runtime.output_dir)
    (out / "summary.json").write_text(json.dumps(summary))


if __name__ == "__main__":
    main()
'''

CONFIG = '''
batching: static
rate: 1
hydra:
  sweep:
    subdir: ${hydra.job.override_dirname}
  callbacks:
    sweep_report:
      _target_: llmperf.run.sweep_callback.SweepReport
'''


def multirun(tmp_path: Path, *extra: str, announces: str = "sweep report:") -> Path:
    app = tmp_path / "app"
    app.mkdir()
    (app / "app.py").write_text(textwrap.dedent(APP))
    (app / "config.yaml").write_text(textwrap.dedent(CONFIG))
    sweep_dir = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "app.py", "-m", "batching=static,continuous", "rate=1,2",
         f"hydra.sweep.dir={sweep_dir}", *extra],
        cwd=app, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert announces in result.stdout + result.stderr
    return sweep_dir


def check_sweep(sweep_dir: Path) -> None:
    rows = list(csv.DictReader((sweep_dir / "sweep.csv").open()))
    assert len(rows) == 4
    by_job = {(r["batching"], r["rate"]): r for r in rows}
    assert set(by_job) == {(b, r) for b in ("static", "continuous") for r in ("1", "2")}
    assert float(by_job["static", "2"]["output_throughput_tps"]) == 50.0
    assert float(by_job["continuous", "2"]["ttft_p99_s"]) == pytest.approx(0.4)
    # continuous beats static at each rate on both axes; between its two rates, neither wins.
    front = {k for k, r in by_job.items() if r["pareto_ttft_p99"] == "True"}
    assert front == {("continuous", "1"), ("continuous", "2")}
    html = (sweep_dir / "report.html").read_text()
    assert html.count('<tr class="front">') == 2
    for png in ("sweep_load", "sweep_pareto", "sweep_cost"):
        assert (sweep_dir / "plots" / f"{png}.png").stat().st_size > 10_000


def test_a_2x2_hydra_multirun_ends_with_sweep_csv_and_report(tmp_path):
    check_sweep(multirun(tmp_path))


def test_submitit_local_launcher_runs_the_same_sweep_and_report(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    check_sweep(multirun(tmp_path, "hydra/launcher=submitit_local",
                         "hydra.launcher.timeout_min=5"))


def test_a_multirun_with_reports_disabled_writes_sweep_csv_only(tmp_path):
    sweep_dir = multirun(tmp_path, "+report.enabled=false", announces="sweep figures:")
    assert len(list(csv.DictReader((sweep_dir / "sweep.csv").open()))) == 4
    assert not (sweep_dir / "report.html").exists() and not (sweep_dir / "plots").exists()
