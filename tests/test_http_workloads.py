"""The workloads users run over HTTP, end to end against llmperf-serve's synthetic engine
(a simulated server whose latencies and reasoning split are its options, so every count
is known in advance): reasoning deltas, whole responses, embeddings, n choices and
best_of, and the client's own connection-pool waits."""

from __future__ import annotations

import asyncio
import io
import json

import httpx
import numpy as np
import pytest
from rich.console import Console

from engines.base import Request
from engines.openai_http import OpenAIEngine
from llmperf.measure.loadgen import LoadGenerator
from llmperf.measure.metrics import compute_metrics
from llmperf.run.config import SloConfig
from llmperf.run.runner import run_benchmark
from llmperf.serve.app import build_app
from llmperf.serve.server import ServerThread, build_server

TPOT_S = 0.01
REASONING = 4


@pytest.fixture(scope="module")
def synthetic():
    server = build_server(
        {"model": "syn", "tpot_s": TPOT_S, "reasoning_tokens": REASONING}, engine_name="synthetic"
    )
    with ServerThread(build_app(server)) as running:
        yield running.base_url


def drive(base_url: str, requests: list[Request], **options):
    engine = OpenAIEngine("syn", base_url=base_url, **options)
    records = []
    engine.start()
    try:
        asyncio.run(LoadGenerator(engine, records.append).run([], requests))
    finally:
        engine.stop()
    return sorted(records, key=lambda r: int(r.id))


def requests(n: int, max_tokens: int, gap_s: float = 0.02, prompt: str = "hello") -> list[Request]:
    return [Request(id=str(i), max_tokens=max_tokens, prompt_text=prompt, arrival_s=gap_s * i)
            for i in range(n)]


def run_over_http(tmp_path, base_url: str, *overrides: str) -> dict:
    from tests.test_run_figures import compose_config

    config = compose_config([
        "engine=openai", f"engine.base_url={base_url}", "engine.model=syn",
        "scenario=offline", "scenario.num_requests=6", "scenario.warmup_requests=1",
        "scenario.prompt_tokens.dist=fixed", "scenario.prompt_tokens.value=16",
        "scenario.output_tokens.dist=fixed", "scenario.output_tokens.value=10",
        "hardware=h100-sxm", "telemetry.enabled=false", "report.enabled=false",
        "engine.metrics_url=off", *overrides,
    ])
    run_benchmark(config, tmp_path, console=Console(file=io.StringIO()))
    return json.loads((tmp_path / "summary.json").read_text())


def served_prompt_tokens(tmp_path) -> int:
    """What the server counts of the measured prompts: the client sends each prompt's ids
    decoded to text (bytes 3..258 as UTF-8, invalid bytes as U+FFFD), the server counts its
    UTF-8 bytes."""
    from engines.reference.tokenizer import ByteTokenizer

    decode = ByteTokenizer(259).decode
    records = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    return sum(len(decode(r["prompt_token_ids"]).encode()) for r in records if not r["warmup"])


def test_reasoning_deltas_over_http_split_into_exact_reasoning_and_answer_counts(
    synthetic, tmp_path
):
    s = run_over_http(tmp_path, synthetic, "engine.endpoint=chat")
    assert s["num_completed"] == 6
    assert s["output_tokens_total"] == 60 and s["token_count_source"] == "server usage"
    assert (s["reasoning_tokens_total"], s["answer_tokens_total"]) == (6 * REASONING, 6 * 6)
    # The answer starts REASONING tokens after the first one, one TPOT each, on the server's
    # absolute deadlines (a first token delivered late shortens the gap a little).
    records = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    for r in (r for r in records if not r["warmup"]):
        assert r["reasoning_tokens"] == REASONING
        thinking_s = r["first_answer_token_s"] - r["first_token_s"]
        assert REASONING * TPOT_S * 0.6 <= thinking_s <= REASONING * TPOT_S + 0.03
    gap = s["ttft_answer_s"]["mean"] - s["ttft_s"]["mean"]
    assert gap == pytest.approx(REASONING * TPOT_S, abs=0.02)


def test_the_chat_stream_sends_reasoning_content_then_content(synthetic):
    body = {"model": "syn", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6,
            "stream": True}
    deltas = []
    with httpx.stream("POST", f"{synthetic}/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                deltas.append(json.loads(line[6:])["choices"][0]["delta"])
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert [next(iter(d)) for d in deltas[1:]] == ["reasoning_content"] * 4 + ["content"] * 2
    whole = httpx.post(f"{synthetic}/chat/completions", json={**body, "stream": False}).json()
    message = whole["choices"][0]["message"]
    assert (len(message["reasoning_content"]), len(message["content"])) == (4, 2)


def test_whole_responses_have_e2e_and_usage_counts_but_no_ttft_or_itl(synthetic, tmp_path):
    s = run_over_http(tmp_path, synthetic, "engine.stream=false", "scenario.slo.ttft_s=0.001",
                      "scenario.record_tokens=true")
    assert s["num_completed"] == 6 and s["output_tokens_total"] == 60
    assert s["input_tokens_total"] == served_prompt_tokens(tmp_path)
    assert s["token_count_source"] == "server usage"
    for figure in ("ttft_s", "tpot_s", "itl_s", "ttft_answer_s"):
        assert set(s[figure].values()) == {None}, figure  # absent, not zero
    assert s["e2e_s"]["min"] >= 9 * TPOT_S  # the whole output, 10 tokens, came at once
    assert s["num_slo_met"] == 6  # no TTFT to miss the 1 ms target with
    records = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert {r["response"] for r in records} == {"whole"}
    assert all(r["token_times_s"] == [] and r["first_token_s"] is None for r in records)


def test_embeddings_over_http_give_requests_per_second_and_latency(synthetic, tmp_path):
    s = run_over_http(tmp_path, synthetic, "engine.endpoint=embeddings",
                      "scenario.record_tokens=true")
    assert (s["num_completed"], s["num_failed"]) == (6, 0)  # no output is not "empty output"
    assert s["output_tokens_total"] == 0
    assert s["input_tokens_total"] == served_prompt_tokens(tmp_path)
    assert s["request_throughput_rps"] == pytest.approx(6 / s["duration_s"])
    assert s["e2e_s"]["mean"] > 0 and set(s["ttft_s"].values()) == {None}


def test_the_served_embedding_is_the_normalized_mean_of_seeded_token_vectors(synthetic):
    ids = [5, 9, 5, 200]
    got = httpx.post(f"{synthetic}/embeddings", json={"model": "syn", "input": ids}).json()
    vectors = []
    for t in ids:
        v = np.random.default_rng(t).standard_normal(64)
        vectors.append(v / np.sqrt((v * v).sum()))
    expected = np.mean(vectors, axis=0)
    expected /= np.sqrt((expected * expected).sum())
    assert np.allclose(got["data"][0]["embedding"], expected, atol=1e-12)
    assert got["usage"] == {"prompt_tokens": 4, "total_tokens": 4}
    again = httpx.post(f"{synthetic}/embeddings", json={"model": "syn", "input": ids}).json()
    assert again["data"] == got["data"]
    bad = httpx.post(f"{synthetic}/embeddings", json={"model": "syn", "input": [999]})
    assert bad.status_code == 400 and "outside the vocabulary" in bad.json()["error"]["message"]


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_n_choices_count_every_choice_and_itl_is_taken_within_each(synthetic, endpoint):
    records = drive(synthetic, requests(4, max_tokens=8), endpoint=endpoint, n=3)
    for r in records:
        assert r.error is None and r.output_tokens == 3 * 8  # the usage counts all choices
        assert sorted(r.token_choices) == sorted([0, 1, 2] * 8)
    s = compute_metrics(records, SloConfig())
    # Interleaved choices arrive ~TPOT/3 apart; within a choice, one TPOT apart.
    assert s["itl_s"]["median"] == pytest.approx(TPOT_S, rel=0.3)
    assert s["tpot_s"]["mean"] == pytest.approx(TPOT_S, rel=0.3)
    assert s["output_tokens_total"] == 4 * 24


def test_best_of_is_sent_and_a_server_that_cannot_honour_it_fails_the_request(synthetic):
    ok = drive(synthetic, requests(2, max_tokens=4), n=2, best_of=2)
    assert [r.output_tokens for r in ok] == [8, 8] and all(r.error is None for r in ok)
    refused = drive(synthetic, requests(1, max_tokens=4), n=2, best_of=3)
    assert refused[0].error.startswith("HTTP 400: best_of=3 with n=2")


def test_requests_beyond_the_connection_pool_wait_for_it_and_the_client_says_so(synthetic):
    """8 requests at once through 2 connections, each held ~10 tokens x 10 ms: two start at
    once, two wait one request's time, two wait two, the last two three."""
    records = drive(synthetic, requests(8, max_tokens=10, gap_s=0.0), max_connections=2)
    waits = sorted(r.pool_wait_s for r in records)
    e2e = min(r.end_s - r.dispatch_s for r in records)
    assert waits[1] < 0.03
    for k in (2, 4, 6):
        assert waits[k] >= (k // 2) * e2e * 0.8, (k, waits)
    s = compute_metrics(records, SloConfig())
    assert s["pool_wait_s"]["max"] == waits[-1]
    unlimited = drive(synthetic, requests(8, max_tokens=10, gap_s=0.0), max_connections=16)
    assert max(r.pool_wait_s for r in unlimited) < 0.03


def test_a_shared_prefix_run_against_a_server_reports_its_measured_reuse_beside_the_expected(
    tmp_path,
):
    """llmperf-serve over the reference engine with prefix caching: 3 groups sharing 96 tokens
    (6 blocks), arriving 8/s so each group's first request is cached before the next comes.
    21 of 24 requests find their 96 tokens cached, by the server's own counter."""
    server = build_server({"model": "tiny", "enable_prefix_caching": True, "max_num_seqs": 8,
                           "num_kv_blocks": 256, "max_model_len": 256})
    with ServerThread(build_app(server)) as running:
        s = run_over_http(
            tmp_path, running.base_url, "engine.model=tiny", "engine.prompt_format=token_ids",
            "engine.metrics_url=null", "engine.metrics_interval_s=0.2",
            "scenario.arrival.process=constant", "scenario.arrival.rate_rps=8",
            "scenario.num_requests=24", "scenario.prompt_tokens.value=24",
            "scenario.output_tokens.value=4", "scenario.prefix.groups=3",
            "scenario.prefix.length=96")
    assert s["server_view"] == "complete" and s["num_completed"] == 24
    assert s["input_tokens_total"] == 24 * 120
    assert s["prefix_cache_hit_rate_expected"] == pytest.approx(21 * 96 / (24 * 120))
    assert s["prefix_cache_hit_source"] == "server /metrics"
    assert s["prefix_cache_hit_tokens"] == s["server_prefix_cache_hits_tokens"] == 21 * 96
    assert s["prefix_cache_hit_rate"] == pytest.approx(21 * 96 / (24 * 120))
