"""engine=openai: streams from an OpenAI-compatible server; a server error, a timeout, a dropped
connection or a killed server fail only the requests they hit, with finish_reason "error"."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from engines.base import Request, SamplingParams
from engines.openai_http import OpenAIEngine, load_client_tokenizer
from engines.openai_options import OpenAIEngineConfig
from engines.openai_stream import UNKNOWN_TOKEN_ID, ChunkIds, choice_text, error_message
from engines.registry import build_engine
from llmperf.measure.loadgen import LoadGenerator
from llmperf.run.config import ModelSelection
from llmperf.serve.app import build_app
from llmperf.serve.server import ServerThread, build_server

REPO_ROOT = Path(__file__).resolve().parents[1]
GREEDY_EXACT = SamplingParams(temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    log_path = tmp_path_factory.mktemp("openai") / "served.jsonl"
    server = build_server(
        {"model": "tiny", "num_kv_blocks": 128, "max_model_len": 256}, request_log=log_path
    )
    with ServerThread(build_app(server)) as running:
        yield running, server, log_path


def collect(engine: OpenAIEngine, requests: list[Request]) -> list[list]:
    async def one(request):
        return [event async for event in engine.stream(request)]

    async def run_all():
        return await asyncio.gather(*(one(r) for r in requests))

    return asyncio.run(run_all())


def test_registry_builds_it_with_the_config_tree_options():
    options = OpenAIEngineConfig(
        model="m",
        base_url="http://127.0.0.1:1/v1/",
        api_key="EMPTY",
        request_timeout_s=5.0,
        connect_timeout_s=1.0,
        tokenizer=None,
    )
    engine = build_engine(options, options.model_for(ModelSelection(name="tiny")))
    assert engine.model == "m"
    assert engine.url == "http://127.0.0.1:1/v1/completions"
    assert engine.info()["endpoint"] == "completions"


def test_streams_the_requested_token_count_with_a_time_per_chunk(served):
    running, server, log_path = served
    engine = OpenAIEngine(model="tiny", base_url=running.base_url, prompt_format="token_ids")
    requests = [
        Request(
            id=f"count-{i}",
            max_tokens=3 + i,
            prompt_token_ids=[5 + i] * (4 + i),
            sampling=GREEDY_EXACT,
        )
        for i in range(6)
    ]
    expected = server.engine.generate(
        [r.prompt_token_ids for r in requests], max_tokens=8, ignore_eos=True
    )
    try:
        results = collect(engine, requests)
    finally:
        engine.stop()
    logged = {
        row["client_request_id"]: row
        for row in map(json.loads, log_path.read_text().split("\n")[:-1])
    }
    for request, events, want in zip(requests, results, expected, strict=True):
        *chunks, final = events
        assert len(chunks) == request.max_tokens
        assert (final.finish_reason, final.error) == ("length", None)
        assert (final.num_output_tokens, final.num_prompt_tokens) == (
            request.max_tokens,
            len(request.prompt_token_ids),
        )
        text = server.tokenizer.decode(want.token_ids[: request.max_tokens])
        assert "".join(e.text for e in chunks) == text
        for event in chunks:  # ids of the chunk's text, or one unknown token for an empty chunk
            assert event.token_ids == (
                tuple(server.tokenizer.encode(event.text)) or (UNKNOWN_TOKEN_ID,)
            )
        times = [e.time_s for e in events]
        assert times == sorted(times)
        row = logged[
            request.id
        ]  # same process, same perf_counter clock: a chunk arrives after its token
        assert row["first_token_s"] <= chunks[0].time_s < row["first_token_s"] + 2.0
        assert row["last_token_s"] <= chunks[-1].time_s


def test_200_concurrent_streams_finish_without_errors_or_leftover_tasks(served):
    running, _, _ = served
    engine = OpenAIEngine(model="tiny", base_url=running.base_url, prompt_format="token_ids")
    requests = [
        Request(id=f"c{i}", max_tokens=2, prompt_token_ids=[3 + i, 4, 5], sampling=GREEDY_EXACT)
        for i in range(200)
    ]

    async def run_all():
        async def one(request):
            return [event async for event in engine.stream(request)]

        results = await asyncio.gather(*(one(r) for r in requests))
        return results, asyncio.all_tasks() - {asyncio.current_task()}

    try:
        results, leftover = asyncio.run(run_all())
        assert not leftover and not engine._tasks  # nothing left on either loop
    finally:
        engine.stop()
    assert [
        (len(events), events[-1].finish_reason, events[-1].num_output_tokens) for events in results
    ] == [(3, "length", 2)] * 200


def test_text_prompts_and_the_chat_endpoint(served):
    running, server, _ = served
    text = "the quick brown fox"
    completions = OpenAIEngine(model="tiny", base_url=running.base_url)
    chat = OpenAIEngine(model="tiny", base_url=running.base_url, endpoint="chat")
    try:
        [plain] = collect(
            completions, [Request(id="t", max_tokens=4, prompt_text=text, sampling=GREEDY_EXACT)]
        )
        [talk] = collect(
            chat, [Request(id="c", max_tokens=5, prompt_text=text, sampling=GREEDY_EXACT)]
        )
    finally:
        completions.stop()
        chat.stop()
    assert (plain[-1].num_output_tokens, plain[-1].num_prompt_tokens) == (4, len(text.encode()))
    expected = server.engine.generate([text], max_tokens=4, ignore_eos=True)[0].text
    assert "".join(e.text for e in plain[:-1]) == expected
    assert len(talk) == 6 and talk[-1].num_output_tokens == 5
    assert talk[-1].num_prompt_tokens == len(f"user: {text}\nassistant:".encode())


def test_a_4xx_from_the_server_fails_that_request_only(served):
    running, _, _ = served
    engine = OpenAIEngine(model="tiny", base_url=running.base_url, prompt_format="token_ids")
    too_long = Request(id="long", max_tokens=10, prompt_token_ids=[7] * 250, sampling=GREEDY_EXACT)
    fine = Request(id="fine", max_tokens=2, prompt_token_ids=[7] * 5, sampling=GREEDY_EXACT)
    try:
        bad, good = collect(engine, [too_long, fine])
    finally:
        engine.stop()
    assert bad[-1].finish_reason == "error"
    assert bad[-1].error.startswith("HTTP 400: This model's maximum context length is 256 tokens")
    assert good[-1].finish_reason == "length" and good[-1].num_output_tokens == 2


def test_stop_ends_open_streams_with_abort(served):
    running, server, _ = served
    engine = OpenAIEngine(model="tiny", base_url=running.base_url, prompt_format="token_ids")
    request = Request(id="stopped", max_tokens=240, prompt_token_ids=[9] * 4, sampling=GREEDY_EXACT)

    async def run():
        events = []
        async for event in engine.stream(request):
            events.append(event)
            if len(events) == 1:
                await asyncio.to_thread(engine.stop)
        return events

    events = asyncio.run(run())
    assert events[-1].finish_reason == "abort"
    assert len(events) < 240


# -- misbehaving servers ------------------------------------------------------------------


def chunk(text: str, finish_reason: str | None = None) -> bytes:
    body = {
        "id": "x",
        "object": "text_completion",
        "choices": [{"index": 0, "text": text, "finish_reason": finish_reason}],
    }
    return f"data: {json.dumps(body)}\n\n".encode()


PACED_GAP_S = 0.1


async def fake_completions(http: HTTPRequest):
    behaviour = (await http.json())["model"]
    if behaviour == "fails":
        return JSONResponse(
            {
                "error": {
                    "message": "out of memory",
                    "type": "server_error",
                    "param": None,
                    "code": None,
                }
            },
            500,
        )

    async def no_usage():
        for text in ("ab", "", "cd"):
            yield chunk(text)
        yield chunk("e", "stop")
        yield b"data: [DONE]\n\n"

    async def stalls():
        yield chunk("a")
        await asyncio.sleep(60)

    async def drops():
        yield chunk("a")
        raise ConnectionAbortedError(
            "the server went away"
        )  # uvicorn closes the connection mid-body

    async def truncated():
        yield chunk("a")

    async def drops_after_words():
        yield chunk(" world")
        yield chunk(" again")
        raise ConnectionAbortedError("the server went away")

    async def paced():  # a token every PACED_GAP_S
        for i, text in enumerate(("a", "b", "c")):
            await asyncio.sleep(PACED_GAP_S)
            yield chunk(text, "length" if i == 2 else None)
        yield b"data: [DONE]\n\n"

    bodies = {
        "paced": paced,
        "no-usage": no_usage,
        "stalls": stalls,
        "drops": drops,
        "truncated": truncated,
        "drops-after-words": drops_after_words,
    }
    return StreamingResponse(bodies[behaviour](), media_type="text/event-stream")


@pytest.fixture(scope="module")
def fake_server():
    app = Starlette(routes=[Route("/v1/completions", fake_completions, methods=["POST"])])
    with ServerThread(app) as running:
        yield running


def run_one(fake_server, behaviour: str, **options) -> tuple[list, float]:
    engine = OpenAIEngine(model=behaviour, base_url=fake_server.base_url, **options)
    start = time.perf_counter()
    try:
        [events] = collect(engine, [Request(id=behaviour, max_tokens=4, prompt_text="x")])
    finally:
        engine.stop()
    return events, time.perf_counter() - start


def test_without_a_usage_chunk_tokens_are_counted_by_tokenizing(fake_server):
    events, _ = run_one(fake_server, "no-usage")
    *chunks, final = events
    assert [e.text for e in chunks] == ["ab", "", "cd", "e"]
    assert [e.token_ids for e in chunks] == [
        (100, 101),
        (UNKNOWN_TOKEN_ID,),
        (102, 103),
        (104,),
    ]  # bytes + 3
    assert (final.finish_reason, final.num_output_tokens, final.num_prompt_tokens) == ("stop", 5, 1)


def test_token_counts_say_where_they_came_from(fake_server, served, tmp_path):
    """Without a usage chunk and without a tokenizer the counts are UTF-8 bytes: the final
    event says so, so the run can warn instead of passing bytes off as tokens."""
    *_, final = run_one(fake_server, "no-usage")[0]
    assert final.token_count_source == "bytes"

    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    tok = Tokenizer(WordLevel({"[UNK]": 0, "ab": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    *_, final = run_one(fake_server, "no-usage", tokenizer=str(tmp_path))[0]
    assert final.token_count_source == "tokenizer"

    running, _, _ = served
    engine = OpenAIEngine(model="tiny", base_url=running.base_url, prompt_format="token_ids")
    try:
        [events] = collect(engine, [Request(id="u", max_tokens=3, prompt_token_ids=[5, 6])])
    finally:
        engine.stop()
    assert events[-1].token_count_source == "server usage"
    assert events[-1].num_output_tokens == 3


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
@pytest.mark.parametrize(
    ("behaviour", "error"),
    [
        ("fails", "HTTP 500: out of memory"),
        ("drops", "connection failed: "),
        ("truncated", "the server closed the stream before it finished"),
    ],
)
def test_server_failures_end_the_request_with_an_error(fake_server, behaviour, error, transport):
    events, _ = run_one(fake_server, behaviour, transport=transport)
    assert events[-1].finished and events[-1].finish_reason == "error"
    assert events[-1].error.startswith(error)


def test_a_request_cut_short_counts_each_chunk_received_as_one_token(fake_server):
    events, _ = run_one(fake_server, "drops-after-words")
    assert [e.text for e in events[:-1]] == [" world", " again"]
    assert events[-1].finish_reason == "error" and events[-1].num_output_tokens == 2


def test_a_stalled_stream_times_out(fake_server):
    events, elapsed_s = run_one(fake_server, "stalls", request_timeout_s=0.5)
    assert [e.text for e in events[:-1]] == ["a"]
    assert events[-1].finish_reason == "error" and "timed out after 0.5 s" in events[-1].error
    assert 0.5 <= elapsed_s < 5.0


def test_nothing_listening_fails_fast():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    engine = OpenAIEngine(model="m", base_url=f"http://127.0.0.1:{port}/v1", connect_timeout_s=2.0)
    try:
        [events] = collect(engine, [Request(id="r", max_tokens=2, prompt_text="x")])
    finally:
        engine.stop()
    assert events[-1].finish_reason == "error" and "Connect" in events[-1].error


def test_error_bodies_in_each_servers_shape():
    assert error_message(b'{"error": {"message": "bad", "type": "x"}}') == "bad"
    assert error_message(b'{"object": "error", "message": "vllm says"}') == "vllm says"
    assert error_message(b'{"error": "tgi says", "error_type": "validation"}') == "tgi says"
    assert error_message(b'{"detail": "fastapi says"}') == "fastapi says"
    assert error_message(b"<html>gateway</html>") == "<html>gateway</html>"


def test_chunk_text_rules():
    assert choice_text({"text": "", "finish_reason": None}) == ""  # a token without text
    assert (
        choice_text({"delta": {"role": "assistant", "content": ""}, "finish_reason": None}) is None
    )
    assert (
        choice_text({"delta": {"role": "assistant", "content": "Hi"}, "finish_reason": None})
        == "Hi"
    )
    assert choice_text({"delta": {}, "finish_reason": "stop"}) is None  # the end marker


def test_chunk_ids_are_the_tokenizers_ids_remembered_up_to_a_bound():
    class Counting:
        def __init__(self):
            self.calls = 0

        def encode(self, text):
            self.calls += 1
            return [ord(c) for c in text]

    tok = Counting()
    ids = ChunkIds(tok, max_entries=2)
    texts = [" the", " cat", " the", " the", " sat", " sat", " cat"]
    assert [ids.encode(t) for t in texts] == [tuple(ord(c) for c in t) for t in texts]
    # " the" and " cat" are remembered; " sat" comes after the bound, so each time from the tokenizer
    assert tok.calls == 4


def test_client_tokenizer_takes_its_vocab_size_from_the_file_and_eos_from_config(tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"[UNK]": 0, "</s>": 1, "the": 2, "cat": 3, "<|eot|>": 4}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": [1, 4]}))
    tokenizer = load_client_tokenizer(str(tmp_path))
    assert (tokenizer.vocab_size, tokenizer.eos_token_ids) == (5, (1, 4))
    assert tokenizer.encode("the cat") == [2, 3]


def test_bad_options_name_the_valid_choices():
    with pytest.raises(ValueError, match="valid: completions, chat, embeddings"):
        OpenAIEngine(model="m", endpoint="rerank")
    with pytest.raises(ValueError, match="n=2: an embedding has no choices"):
        OpenAIEngine(model="m", endpoint="embeddings", n=2)
    with pytest.raises(ValueError, match="best_of=2: only endpoint completions takes best_of"):
        OpenAIEngine(model="m", endpoint="chat", best_of=2)
    with pytest.raises(ValueError, match=r"best_of=2: must be at least n \(3\)"):
        OpenAIEngine(model="m", n=3, best_of=2)
    with pytest.raises(ValueError, match="n=0: must be > 0"):
        OpenAIEngine(model="m", n=0)
    with pytest.raises(ValueError, match="valid: text, token_ids"):
        OpenAIEngine(model="m", prompt_format="bytes")
    with pytest.raises(ValueError, match="request_timeout_s=0: must be > 0"):
        OpenAIEngine(model="m", request_timeout_s=0)


# -- a server killed mid-run ------------------------------------------------------------


@pytest.fixture
def server_process():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    args = ["model=tiny", f"port={port}", "engine.num_kv_blocks=1024", "engine.max_model_len=4096"]
    proc = subprocess.Popen([sys.executable, "-m", "llmperf.serve", *args], cwd=REPO_ROOT, env=env)
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "llmperf-serve did not start"
        time.sleep(0.1)
    yield proc, f"http://127.0.0.1:{port}/v1"
    proc.kill()
    proc.wait()


def test_killing_the_server_mid_stream_fails_the_open_requests_within_their_timeout(server_process):
    proc, base_url = server_process
    timeout_s = 20.0
    engine = OpenAIEngine(
        model="tiny", base_url=base_url, request_timeout_s=timeout_s, prompt_format="token_ids"
    )
    requests = [
        Request(id=f"k{i}", max_tokens=4000, prompt_token_ids=[11 + i] * 8, sampling=GREEDY_EXACT)
        for i in range(8)
    ]
    started: set[str] = set()

    async def one(request):
        events = []
        async for event in engine.stream(request):
            events.append(event)
            started.add(request.id)
        return events

    async def run():
        tasks = [asyncio.create_task(one(r)) for r in requests]
        while len(started) < len(requests):
            await asyncio.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        killed_s = time.perf_counter()
        results = await asyncio.gather(*tasks)
        return results, time.perf_counter() - killed_s

    try:
        results, ended_after_s = asyncio.run(run())
    finally:
        engine.stop()
    assert ended_after_s < timeout_s
    for events in results:
        assert len(events) >= 2  # at least a token, then the end
        assert events[-1].finish_reason == "error"
        assert events[-1].error.startswith("connection failed")


# -- the served model's shape, for the roofline (defect d) ------------------------------


def test_an_http_run_gets_a_roofline_estimate_from_the_served_models_config(
    served, tmp_path, compose_config
):
    """Defect d: HTTP runs never got a roofline estimate (OpenAIEngine.info had no model
    config). With engine.model_config the account gives the bytes the estimate needs."""
    import io

    from rich.console import Console

    from engines.reference.presets import get_preset
    from llmperf.perf.footprint import footprint
    from llmperf.run.runner import run_benchmark

    running, _, _ = served
    config = compose_config(
        "engine=openai", f"engine.base_url={running.base_url}", "engine.model=tiny",
        "engine.prompt_format=token_ids", "engine.model_config=tiny", "engine.precision=fp32",
        "scenario=offline", "scenario.num_requests=6", "scenario.warmup_requests=0",
        "scenario.prompt_tokens.dist=fixed", "scenario.prompt_tokens.value=16",
        "scenario.output_tokens.dist=fixed", "scenario.output_tokens.value=8",
        "hardware=cpu", "telemetry.enabled=false", "report.enabled=false",
    )  # fmt: skip
    run_benchmark(config, tmp_path, console=Console(file=io.StringIO()))
    s = json.loads((tmp_path / "summary.json").read_text())
    tiny = get_preset("tiny")
    account = footprint(tiny, "fp32", "cpu")
    assert s["engine"]["weight_bytes"] == account.weight_bytes == tiny.num_params() * 4
    assert s["engine"]["weight_bytes_source"] == "account"
    assert s["engine"]["model_config_source"] == "model_config"
    assert s["roofline_source"] == "estimate"
    # The estimate by hand: the mean decode batch by Little's law, one decode step of it
    # over the mean TPOT, each sequence at its prompt plus half its output.
    tpot = s["tpot_s"]["mean"]
    batch = max(1.0, s["output_throughput_tps"] * tpot)
    context = (s["input_tokens_total"] + s["output_tokens_total"] / 2) / s["num_completed"]
    kv = account.kv_bytes_per_token
    read = account.weight_bytes + batch * context * kv + batch * kv
    bandwidth = s["hardware"]["measured_mem_bw_bytes_per_s"]
    assert s["mbu_decode"] == pytest.approx(read / tpot / bandwidth, rel=1e-6)


def test_the_served_models_config_comes_from_the_tokenizers_folder(tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    from engines.reference.presets import get_preset

    Tokenizer(WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]")).save(
        str(tmp_path / "tokenizer.json")
    )
    (tmp_path / "config.json").write_text(
        json.dumps({**get_preset("tiny").to_hf_dict(), "torch_dtype": "bfloat16"})
    )
    engine = OpenAIEngine(model="m", tokenizer=str(tmp_path / "tokenizer.json"))
    info = engine.info()
    assert info["model_config_source"] == "tokenizer" and info["precision"] == "bf16"
    assert info["model_config"]["hidden_size"] == 256
    assert OpenAIEngine(model="m", tokenizer=str(tmp_path), precision="int8").info()[
        "precision"
    ] == "int8"
    assert "model_config" not in OpenAIEngine(model="m").info()
    # A config.json that is not a decoder's shape (only its eos ids) names no model.
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": [1]}))
    assert "model_config" not in OpenAIEngine(model="m", tokenizer=str(tmp_path)).info()


def test_a_bad_model_config_or_precision_is_one_line_and_exit_2(compose_config, tmp_path):
    from llmperf.errors import UsageError
    from llmperf.run.runner import Run, build

    for override, message in (
        ("engine.model_config=nope", "unknown model preset 'nope'"),
        ("engine.precision=int3", "unknown precision 'int3'; valid: fp32, bf16"),
    ):
        run = Run(compose_config("engine=openai", override), tmp_path)
        with pytest.raises(UsageError, match=message):
            build(run)


def test_the_runs_checkpoint_folder_names_the_served_model(compose_config):
    config = compose_config("engine=openai", "model.path=/checkpoints/my-llama")
    assert config.engine.with_model(config.model).model_config == "/checkpoints/my-llama"
    config = compose_config("engine=openai", "model.path=/a", "engine.model_config=tiny")
    assert config.engine.with_model(config.model).model_config == "tiny"


def test_with_http_thread_a_busy_load_generator_loop_does_not_delay_ttft_or_itl(fake_server):
    """engine.http_thread=true: the chunks arrive on the engine's HTTP thread while the load
    generator's loop is blocked for 0.35 s: TTFT and ITL are the server's pacing, not the
    loop's delay. (On the default path a blocked loop stamps late, and its event-loop lag
    says so: test_client_verdicts.py.)"""
    block_s = 0.35

    class BusyLoopEngine(OpenAIEngine):
        async def stream(self, request):
            # block the caller's loop from 20 ms after the request goes out: every chunk
            # arrives while it is blocked
            asyncio.get_running_loop().call_later(0.02, time.sleep, block_s)
            async for event in super().stream(request):
                yield event

    engine = BusyLoopEngine(model="paced", base_url=fake_server.base_url, http_thread=True)
    records = []
    loadgen = LoadGenerator(engine, records.append)

    async def main():
        return await loadgen.run([], [Request(id="paced", max_tokens=3, prompt_text="x")])

    engine.start()
    try:
        asyncio.run(main())
    finally:
        engine.stop()
    [record] = records
    assert record.error is None and record.output_tokens == 3
    ttft_s = record.first_token_s - record.arrival_s
    itls_s = [b - a for a, b in itertools.pairwise(record.token_times_s)]
    assert ttft_s == pytest.approx(PACED_GAP_S, abs=0.04)  # not the end of the 0.35 s block
    assert itls_s == pytest.approx([PACED_GAP_S, PACED_GAP_S], abs=0.03)
