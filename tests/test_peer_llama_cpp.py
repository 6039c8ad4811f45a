"""Against llama.cpp's llama-server, built by scripts/install-llama-cpp.sh (the `peer` marker;
`python -m pytest -m peer`; the default run reads a live server's /metrics text): a managed run on a GGUF of the tiny preset is started, scraped
and stopped, its server's token counters agree with the client's, and a GGUF llama.cpp
cannot load is one line and exit 2. Without the binary they fail, naming the script. Each
run takes a few seconds: llama.cpp loads the 13 MB file at once."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NUM_REQUESTS, OUTPUT_TOKENS = 8, 16


# A live llama-server's /metrics (the build scripts/install-llama-cpp.sh makes), after two
# completions of 5 tokens whose prompts, 11 tokens each, share their first 8: the second
# request's slot reused them (its usage said cached_tokens 8), so 11 + 11 - 8 were computed.
LIVE_METRICS = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 14
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 8
# HELP llamacpp:prompt_seconds_total Total time spent processing prompts
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 0.040489
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 10
# HELP llamacpp:tokens_predicted_seconds_total Total time spent generating tokens
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 0.008718
# HELP llamacpp:n_decode_total Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 10
# HELP llamacpp:n_tokens_max Largest observed sequence length (prompt + generation)
# TYPE llamacpp:n_tokens_max counter
llamacpp:n_tokens_max 15
# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 0
# HELP llamacpp:spec_decode_num_accepted_tokens_total Speculative: Total draft tokens accepted by the target model
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 0
# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative decoding verification steps
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 0
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 345.773
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 917.642
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 0
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode gauge
llamacpp:n_busy_slots_per_decode 1
"""


def test_the_llama_cpp_mapping_reads_a_live_servers_metrics():
    from llmperf.serverside.families import FAMILIES
    from llmperf.serverside.scraper import parse_rows

    family, rows = parse_rows(LIVE_METRICS, 0.0)
    assert family is FAMILIES["llama.cpp"]
    values = {r.figure: r.value for r in rows}
    assert values == {
        "prompt_tokens": 11 + 11 - 8, "output_tokens": 2 * 5, "running": 0, "waiting": 0,
        "spec_decode_drafts": 0, "spec_decode_draft_tokens": 0, "spec_decode_accepted_tokens": 0,
    }
    assert {r.metric for r in rows} == set(family.metrics.values())  # each name is the server's


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, Path]:
    """The tiny preset as a GGUF file (f32) and as a checkpoint folder (its tokenizer)."""
    from llmperf.export.checkpoint import export_checkpoint
    from llmperf.export.gguf_file import export_gguf
    from tests.test_export_gguf import llama_server_binary  # fails naming the install script

    llama_server_binary()
    root = tmp_path_factory.mktemp("llama-cpp")
    export_gguf(root / "tiny-f32.gguf", preset="tiny", type="f32")
    return root / "tiny-f32.gguf", export_checkpoint("tiny", root / "tiny").path


def llmperf(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "llmperf",
            "engine=openai",
            "engine.launch=llama.cpp",
            *args,
            "telemetry.enabled=false",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.peer
def test_a_managed_llama_cpp_run_is_scraped_logged_stopped_and_counts_the_clients_tokens(
    tiny, tmp_path
):
    gguf, checkpoint = tiny
    proc = llmperf(
        tmp_path,
        f"model.path={gguf}",
        f"engine.tokenizer={checkpoint}",
        "engine.prompt_format=token_ids",
        "engine.launch.args.threads=2",
        "engine.launch.args.parallel=2",
        "engine.launch.args.ctx_size=2048",
        # No slot reuse: llamacpp:prompt_tokens_total leaves out the tokens a slot finds
        # already in its cache (a shared BOS, say), which the client counts.
        "engine.launch.args.no_cache_prompt=true",
        "engine.metrics_interval_s=0.2",
        "scenario=chat",
        f"scenario.num_requests={NUM_REQUESTS}",
        "scenario.arrival.rate_rps=8",
        "scenario.output_tokens.dist=fixed",
        f"scenario.output_tokens.value={OUTPUT_TOKENS}",
        f"scenario.validity.min_completed={NUM_REQUESTS}",
        "scenario.validity.min_duration_s=0",
    )
    assert proc.returncode == 0, proc.stderr
    run = tmp_path / "run"
    s = json.loads((run / "summary.json").read_text())

    server = s["server"]  # started, recorded, stopped cleanly (SIGTERM, exit 0)
    assert server["family"] == "llama.cpp" and server["served_model"] == str(gguf)
    assert server["command"][1:3] == ["-m", str(gguf)] and "--metrics" in server["command"]
    assert "--no-cache-prompt" in server["command"] and 0 < server["startup_s"] < 60
    assert server["exit_code"] == 0 and not server["died_during_run"]
    port = server["base_url"].split(":")[2].split("/")[0]
    left = subprocess.run(["pgrep", "-f", f"llama-server.*--port {port}"], capture_output=True, text=True)
    assert left.stdout.strip() == ""

    log = (run / "server.log").read_text()
    assert f"listening on http://127.0.0.1:{port}" in log
    assert "cleaning up before exit" in log  # llama.cpp's own words as SIGTERM stops it

    # Scraped: the mapped metrics at several scrapes, the window complete.
    with (run / "server_metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {r["metric"] for r in rows} >= {
        "llamacpp:prompt_tokens", "llamacpp:tokens_predicted",
        "llamacpp:requests_processing", "llamacpp:requests_deferred",
    }
    assert len({r["t_s"] for r in rows}) >= 3
    assert s["server_family"] == "llama.cpp" and s["server_view"] == "complete"
    assert s["server_scrape_errors"] == 0

    # The server's counters over the window are the client's measured tokens, exactly.
    records = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    measured = [r for r in records if not r["warmup"] and r["error"] is None]
    assert len(measured) == s["num_completed"] == NUM_REQUESTS
    assert s["server_output_tokens"] == s["output_tokens_total"] == NUM_REQUESTS * OUTPUT_TOKENS
    assert s["server_prompt_tokens"] == s["input_tokens_total"] == sum(r["input_tokens"] for r in measured)
    assert s["server_spec_decode_drafts"] == 0 and "server_spec_decode_acceptance_rate" not in s

    # No per-request latency on llama.cpp's /metrics: a note, not an empty or made-up split.
    assert "ttft_overhead_s" not in s and "server_ttft_s" not in s
    assert s["server_note"].startswith("llama.cpp's /metrics has counters and gauges only")
    (agrees,) = [c for c in s["validity"] if c["check"] == "server_agrees"]
    assert agrees["ok"] and agrees["detail"] == s["server_note"]


@pytest.mark.peer
def test_a_gguf_llama_cpp_cannot_load_is_one_line_naming_its_log_and_exit_2(tiny, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00not a model")
    proc = llmperf(tmp_path, f"model.path={bad}", "scenario.num_requests=4")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    log = tmp_path / "run" / "server.log"
    assert f"engine.launch: llama.cpp exited with code 1 before it was ready; {log}:" in proc.stderr
    assert "exiting due to model loading error" in proc.stderr  # the log's tail, in the line
    assert "failed to load model" in log.read_text()
