"""scenario.images: PNG and JPEG files generated from the seed, sent as content parts; llmperf-
serve counts one token per 32×32 patch (256 for 512×512), and the records keep the image bytes
sent and the image tokens the server reported."""

from __future__ import annotations

import base64
import io
import json

import httpx
import pytest
from PIL import Image
from rich.console import Console

from engines.endpoints.base import data_uri
from llmperf.errors import ConfigError
from llmperf.run.runner import run_benchmark
from llmperf.serve.app import build_app
from llmperf.serve.images import image_size, image_tokens
from llmperf.serve.server import ServerThread, build_server
from llmperf.workload.images import ImageConfig, request_images
from tests.test_run_figures import compose_config

NUM_REQUESTS = 4


def test_images_are_the_seeds_own_each_requests_distinct_and_of_the_asked_size_and_format():
    config = ImageConfig(count=2, format="png")
    first = request_images(config, seed=3, phase=0, index=5)
    assert first == request_images(config, seed=3, phase=0, index=5)
    assert first != request_images(config, seed=3, phase=0, index=6)
    assert first != request_images(config, seed=4, phase=0, index=5)
    assert len(set(first)) == 2
    for data in first:
        image = Image.open(io.BytesIO(data))
        assert (image.format, image.size) == ("PNG", (512, 512))
    jpeg = request_images(ImageConfig(count=1, format="jpeg", width_px=300, height_px=200), 0, 0, 0)[0]
    assert Image.open(io.BytesIO(jpeg)).format == "JPEG" and image_size(jpeg) == (300, 200)
    assert request_images(ImageConfig(count=0), 0, 0, 0) == ()


def test_a_size_distribution_draws_each_image_from_its_list():
    config = ImageConfig(count=4, sizes=["64x32", "128x128"])
    sizes = {image_size(d) for i in range(8) for d in request_images(config, 0, 0, i)}
    assert sizes == {(64, 32), (128, 128)}


@pytest.mark.parametrize("fields, key", [
    ({"format": "gif"}, "format"), ({"count": -1}, "count"), ({"sizes": ["big"]}, "sizes"),
    ({"width_px": 0}, "width_px"), ({"sizes": ["9000x10"]}, "sizes"),
])
def test_bad_image_options_name_the_field(fields, key):
    with pytest.raises(ConfigError) as err:
        ImageConfig(**fields)
    assert err.value.key == key


def test_the_server_counts_one_token_per_32_pixel_patch():
    assert image_tokens(512, 512) == 256
    assert image_tokens(100, 50) == 4 * 2


@pytest.fixture(scope="module")
def serve():
    server = build_server({"model": "syn", "tpot_s": 0.001}, engine_name="synthetic")
    with ServerThread(build_app(server)) as running:
        yield running.base_url


def run(tmp_path, base_url: str, endpoint: str, count: int) -> list[dict]:
    config = compose_config([
        "engine=openai", f"engine.base_url={base_url}", "engine.model=syn", f"engine.endpoint={endpoint}",
        "engine.metrics_url=off", "scenario=offline", f"scenario.num_requests={NUM_REQUESTS}",
        "scenario.warmup_requests=1", "scenario.prompt_tokens.dist=fixed", "scenario.prompt_tokens.value=16",
        "scenario.output_tokens.dist=fixed", "scenario.output_tokens.value=4", f"scenario.images.count={count}",
        "hardware=cpu", "telemetry.enabled=false", "report.enabled=false",
    ])
    run_benchmark(config, tmp_path, console=Console(file=io.StringIO()))
    lines = (tmp_path / "requests.jsonl").read_text().splitlines()
    return sorted((r for r in map(json.loads, lines) if not r["warmup"]), key=lambda r: int(r["id"]))


@pytest.mark.parametrize("endpoint", ["chat", "responses", "messages"])
def test_runs_with_1_and_4_images_record_their_bytes_and_the_servers_image_tokens(serve, tmp_path, endpoint):
    plain = run(tmp_path / "0", serve, endpoint, 0)
    assert [(r["image_bytes"], r["image_tokens"]) for r in plain] == [(0, None)] * NUM_REQUESTS
    for count in (1, 4):
        records = run(tmp_path / str(count), serve, endpoint, count)
        expected_bytes = [sum(map(len, request_images(ImageConfig(count=count), 0, 0, i)))
                          for i in range(NUM_REQUESTS)]
        assert [r["image_bytes"] for r in records] == expected_bytes
        assert all(r["error"] is None for r in records)
        assert [r["image_tokens"] for r in records] == [256 * count] * NUM_REQUESTS
        # the image tokens are on top of the same text's tokens
        assert [r["input_tokens"] for r in records] == [p["input_tokens"] + 256 * count for p in plain]


def test_the_server_refuses_an_image_it_cannot_read_with_a_400(serve):
    png = request_images(ImageConfig(count=1, width_px=64, height_px=64), 0, 0, 0)[0]
    def chat(url: str) -> httpx.Response:
        content = [{"type": "text", "text": "what is it"}, {"type": "image_url", "image_url": {"url": url}}]
        return httpx.post(f"{serve}/chat/completions", timeout=30, json={
            "model": "syn", "max_tokens": 2, "messages": [{"role": "user", "content": content}]})
    ok = chat(data_uri(png))
    assert ok.status_code == 200 and ok.json()["usage"]["prompt_tokens_details"] == {"image_tokens": 4}
    remote = chat("https://example.com/cat.png")
    assert remote.status_code == 400 and "base64 data URI" in remote.json()["error"]["message"]
    gif = "data:image/gif;base64," + base64.b64encode(b"GIF89a" + bytes(20)).decode()
    assert chat(gif).status_code == 400
