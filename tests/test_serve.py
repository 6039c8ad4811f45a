"""llmperf-serve: the official openai client streams from it, bad requests get OpenAI errors,
metrics and the request log agree with what clients saw, disconnects abort."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engines.base import EngineCapabilities
from llmperf.errors import UsageError
from llmperf.serve.app import OpenAIServer, build_app, engine_load
from llmperf.serve.chat_template import (
    DEFAULT_CHAT_TEMPLATE,
    compile_chat_template,
    load_chat_template,
)
from llmperf.serve.cli import main, parse_overrides
from llmperf.serve.detokenize import IncrementalDetokenizer
from llmperf.serve.server import ServerThread, build_server
from tests.fakes import ScriptedEngine

MAX_MODEL_LEN = 512
ENGINE_OPTIONS = {
    "model": "tiny",
    "num_kv_blocks": 256,
    "max_model_len": MAX_MODEL_LEN,
    "max_num_seqs": 64,
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    log_path = tmp_path_factory.mktemp("serve") / "requests.jsonl"
    server = build_server(ENGINE_OPTIONS, request_log=log_path)
    with ServerThread(build_app(server)) as running:
        yield running, server, log_path


@pytest.fixture(scope="module")
def client(served):
    running, _, _ = served
    return openai.OpenAI(base_url=running.base_url, api_key="unused", max_retries=0)


def root(served) -> str:
    return served[0].base_url.removesuffix("/v1")


def log_rows(log_path) -> list[dict]:
    """The log's complete lines (the server may be writing the next one)."""
    return [json.loads(line) for line in log_path.read_text().split("\n")[:-1]]


def metric_values(text: str) -> dict[tuple[str, tuple], float]:
    """(sample name, its labels other than model_name) -> value, through prometheus_client's parser."""
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "model_name"))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def wait_until(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


# -- the official client --------------------------------------------------------------


def test_openai_client_streams_a_completion_with_usage_chunk(served, client):
    _, server, _ = served
    prompt = "Hello, world"
    expected = server.engine.generate([prompt], max_tokens=6, ignore_eos=True)[0]
    stream = client.completions.create(
        model="tiny",
        prompt=prompt,
        max_tokens=6,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    token_chunks, usage_chunk = chunks[:-1], chunks[-1]
    assert len(token_chunks) == 6  # one chunk per token, even a token without text
    assert [c.choices[0].finish_reason for c in token_chunks] == [None] * 5 + ["length"]
    assert "".join(c.choices[0].text for c in token_chunks) == expected.text
    assert usage_chunk.choices == []
    assert usage_chunk.usage.completion_tokens == 6
    assert usage_chunk.usage.prompt_tokens == len(prompt.encode())  # byte-level tokenizer
    assert len({c.id for c in chunks}) == 1


def test_openai_client_gets_a_whole_completion(served, client):
    _, server, _ = served
    ids = [40, 41, 42, 300, 301]
    expected = server.engine.generate([ids], max_tokens=5, ignore_eos=True)[0]
    out = client.completions.create(
        model="tiny", prompt=ids, max_tokens=5, temperature=0, extra_body={"ignore_eos": True}
    )
    assert out.object == "text_completion"
    assert out.choices[0].text == expected.text
    assert out.choices[0].finish_reason == "length"
    assert (out.usage.prompt_tokens, out.usage.completion_tokens, out.usage.total_tokens) == (
        5,
        5,
        10,
    )


def test_openai_client_streams_chat_over_the_default_template(served, client):
    _, server, _ = served
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    prompt = "system: be brief\nuser: hi\nassistant:"
    expected = server.engine.generate([prompt], max_tokens=4, ignore_eos=True)[0]
    stream = client.chat.completions.create(
        model="tiny",
        messages=messages,
        max_tokens=4,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    role, *tokens, usage = list(stream)
    assert (role.choices[0].delta.role, role.choices[0].delta.content) == ("assistant", "")
    assert len(tokens) == 4
    assert "".join(c.choices[0].delta.content for c in tokens) == expected.text
    assert [c.choices[0].finish_reason for c in tokens] == [None, None, None, "length"]
    assert usage.usage.prompt_tokens == len(prompt.encode())
    whole = client.chat.completions.create(
        model="tiny",
        messages=messages,
        max_tokens=4,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert whole.choices[0].message.content == expected.text
    assert whole.choices[0].message.role == "assistant"


def test_models_lists_the_served_model_and_health_answers(served, client):
    models = client.models.list().data
    assert [m.id for m in models] == ["tiny"]
    assert models[0].model_extra["max_model_len"] == MAX_MODEL_LEN
    assert httpx.get(f"{root(served)}/health").json() == {"status": "ok"}


# -- bad requests ---------------------------------------------------------------------

LONG_PROMPT = [3 + i % 500 for i in range(MAX_MODEL_LEN)]

BAD_REQUESTS = [
    ("completions", b'{"model": "tiny", "prompt": ', 400, None, "not valid JSON"),
    ("completions", b'["a list"]', 400, None, "JSON object"),
    ("completions", {"prompt": "hi"}, 400, "model", "model"),
    ("completions", {"model": "tiny"}, 400, "prompt", "prompt"),
    ("completions", {"model": "tiny", "prompt": "hi", "max_tokens": 0}, 400, "max_tokens", ">= 1"),
    ("completions", {"model": "tiny", "prompt": "hi", "max_tokens": -3}, 400, "max_tokens", ">= 1"),
    (
        "completions",
        {"model": "tiny", "prompt": "hi", "max_tokens": "many"},
        400,
        "max_tokens",
        "integer",
    ),
    (
        "completions",
        {"model": "tiny", "prompt": LONG_PROMPT, "max_tokens": 1},
        400,
        "prompt",
        "maximum context length is 512",
    ),
    ("completions", {"model": "tiny", "prompt": [3, 999]}, 400, "prompt", "outside the vocabulary"),
    ("completions", {"model": "gpt-9", "prompt": "hi"}, 404, "model", "does not exist"),
    (
        "completions",
        {"model": "tiny", "prompt": "hi", "temperature": 3},
        400,
        "temperature",
        "[0, 2.0]",
    ),
    (
        "completions",
        {"model": "tiny", "prompt": "hi", "temperature": "hot"},
        400,
        "temperature",
        "number",
    ),
    ("completions", {"model": "tiny", "prompt": "hi", "top_p": 0}, 400, "top_p", "(0, 1]"),
    ("completions", {"model": "tiny", "prompt": "hi", "n": 2, "best_of": 3}, 400, "best_of", "best_of must equal n"),
    ("completions", {"model": "tiny", "prompt": "hi", "n": 0}, 400, "n", "n must be >= 1"),
    (
        "completions",
        {"model": "tiny", "prompt": "hi", "stream": "yes"},
        400,
        "stream",
        "true or false",
    ),
    (
        "completions",
        {"model": "tiny", "prompt": "hi", "seed": 2**70, "temperature": 1},
        400,
        "seed",
        "seed must be in [-9223372036854775808, 18446744073709551615], got 1180591620717411303424",
    ),
    (
        "completions",
        {"model": "tiny", "prompt": "hi", "seed": -(2**63) - 1, "temperature": 1, "stream": True},
        400,
        "seed",
        "seed must be in",
    ),
    ("chat/completions", {"model": "tiny"}, 400, "messages", "messages"),
    (
        "chat/completions",
        {"model": "tiny", "messages": [{"content": "x"}]},
        400,
        "messages[0]",
        "role",
    ),
    (
        "chat/completions",
        {
            "model": "tiny",
            "messages": [{"role": "user", "content": "x"}],
            "max_tokens": MAX_MODEL_LEN,
        },
        400,
        "messages",
        "maximum context length",
    ),
    ("nowhere", {}, 404, None, "Not Found"),
]


@pytest.mark.parametrize(("path", "body", "status", "param", "message"), BAD_REQUESTS)
def test_bad_request_gets_an_openai_error_and_the_server_keeps_serving(
    served, client, path, body, status, param, message
):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = httpx.post(
        f"{served[0].base_url}/{path}",
        content=content,
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert message in error["message"]
    assert error["param"] == param
    after = client.completions.create(
        model="tiny", prompt="ok", max_tokens=2, extra_body={"ignore_eos": True}
    )
    assert after.usage.completion_tokens == 2


def test_openai_client_raises_its_typed_errors(client):
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.completions.create(model="tiny", prompt=LONG_PROMPT, max_tokens=1)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="other", prompt="x", max_tokens=1)


def test_an_engine_fault_ends_a_stream_with_an_error_event_and_done():
    engine = ScriptedEngine(lambda request: RuntimeError("kv cache on fire"))
    engine.max_model_len = 64
    server = OpenAIServer(engine, "tiny")
    body = {"model": "tiny", "prompt": "hi", "max_tokens": 2}
    with ServerThread(build_app(server)) as running:
        streamed = httpx.post(f"{running.base_url}/completions", json={**body, "stream": True})
        whole = httpx.post(f"{running.base_url}/completions", json=body)
    events = [line.removeprefix("data: ") for line in streamed.text.split("\n\n") if line]
    message = "internal error: RuntimeError: kv cache on fire"
    assert streamed.status_code == 200 and len(events) == 2 and events[1] == "[DONE]"
    assert json.loads(events[0])["error"] == {
        "message": message,
        "type": "server_error",
        "param": None,
        "code": None,
    }
    assert whole.status_code == 500 and whole.json()["error"]["message"] == message
    finished = metric_values(server.metrics.render(engine_load(server.engine, 0)).decode())
    assert finished[("vllm:request_success_total", (("finished_reason", "error"),))] == 2
    assert finished[("vllm:request_success_total", (("finished_reason", "abort"),))] == 0


def test_a_cancelled_whole_response_leaves_no_task_or_engine_stream_behind():
    from engines.base import SamplingParams
    from llmperf.serve.protocol import GenerationSpec
    from llmperf.serve.request_log import ServedRequest

    engine = ScriptedEngine(lambda request: [(60.0, 1)])  # the first token never comes
    engine.max_model_len = 64
    server = OpenAIServer(engine, "tiny")
    spec = GenerationSpec("completions", "tiny", [1, 2], 2, SamplingParams(), False, False)

    class Connected:
        async def receive(self):
            await asyncio.Event().wait()  # the client stays

    async def run():
        served = ServedRequest("cmpl-x", "completions", time.perf_counter(), time.time())
        handler = asyncio.create_task(server._whole(Connected(), spec, served))
        while engine.open_streams == 0:
            await asyncio.sleep(0.001)
        handler.cancel()  # e.g. the server shutting down
        await asyncio.gather(handler, return_exceptions=True)
        await asyncio.sleep(0)
        return served, asyncio.all_tasks() - {asyncio.current_task()}

    served, left = asyncio.run(run())
    assert left == set() and engine.open_streams == 0
    assert served.finish_reason == "abort" and server.metrics.num_in_flight == 0


def test_api_key_guards_the_api_but_not_health(served):
    _, server, _ = served
    guarded = OpenAIServer(server.engine, "tiny", api_key="s3cret")
    with ServerThread(build_app(guarded, manage_engine=False)) as running:
        for key in ("wrong", None):
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            response = httpx.get(f"{running.base_url}/models", headers=headers)
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=running.base_url, api_key="wrong", max_retries=0).models.list()
        ok = openai.OpenAI(base_url=running.base_url, api_key="s3cret", max_retries=0)
        assert (
            ok.completions.create(model="tiny", prompt="x", max_tokens=1).usage.completion_tokens
            == 1
        )
        assert httpx.get(running.base_url.removesuffix("/v1") + "/health").status_code == 200


# -- concurrency, disconnects, metrics ---------------------------------------------------


def test_200_concurrent_streams_complete_and_leave_nothing_behind(served):
    running, server, _ = served

    async def one(client: openai.AsyncOpenAI, i: int) -> tuple[int, int]:
        stream = await client.completions.create(
            model="tiny",
            prompt=[3 + i % 200, 7, 9],
            max_tokens=3,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        chunks = [c async for c in stream]
        return len(chunks) - 1, chunks[-1].usage.completion_tokens

    async def run_all():
        async with openai.AsyncOpenAI(
            base_url=running.base_url, api_key="-", max_retries=0
        ) as client:
            results = await asyncio.gather(*(one(client, i) for i in range(200)))
        others = asyncio.all_tasks() - {asyncio.current_task()}
        return results, others

    results, leftover_tasks = asyncio.run(run_all())
    assert results == [(3, 3)] * 200
    assert not leftover_tasks
    engine = server.engine
    wait_until(lambda: server.metrics.num_in_flight == 0)
    assert not engine.scheduler.has_work() and not engine._live
    assert engine.kv.num_free_blocks == engine.kv.num_blocks
    assert engine_load(engine, server.metrics.num_in_flight).num_waiting == 0


def test_client_disconnect_aborts_its_request(served):
    running, server, log_path = served
    body = {
        "model": "tiny",
        "prompt": "abort me",
        "max_tokens": 100,
        "stream": True,
        "ignore_eos": True,
    }
    with httpx.stream(
        "POST", f"{running.base_url}/completions", json=body, headers={"X-Request-Id": "leaver"}
    ) as response:
        lines = response.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))
    wait_until(lambda: any(r["client_request_id"] == "leaver" for r in log_rows(log_path)))
    row = next(r for r in log_rows(log_path) if r["client_request_id"] == "leaver")
    assert row["finish_reason"] == "abort"
    assert 1 <= row["num_output_tokens"] < 100
    wait_until(lambda: not server.engine._live)


def test_client_leaving_a_whole_response_aborts_its_request(served):
    running, server, log_path = served
    body = {"model": "tiny", "prompt": "wait", "max_tokens": MAX_MODEL_LEN - 8, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{running.base_url}/completions",
            json=body,
            headers={"X-Request-Id": "impatient"},
            timeout=httpx.Timeout(5.0, read=0.3),
        )
    wait_until(lambda: any(r["client_request_id"] == "impatient" for r in log_rows(log_path)))
    row = next(r for r in log_rows(log_path) if r["client_request_id"] == "impatient")
    assert row["finish_reason"] == "abort"
    assert row["num_output_tokens"] < MAX_MODEL_LEN - 8


def test_metrics_and_request_log_agree_with_the_requests(served, client):
    running, server, log_path = served
    before = metric_values(httpx.get(f"{root(served)}/metrics").text)
    num_before = len(log_rows(log_path))
    for i in range(4):
        client.completions.create(
            model="tiny",
            prompt=[10 + i] * (i + 2),
            max_tokens=i + 2,
            extra_body={"ignore_eos": True},
            extra_headers={"X-Request-Id": f"m{i}"},
        )
    rows = log_rows(log_path)[num_before:]
    after = metric_values(httpx.get(f"{root(served)}/metrics").text)

    def delta(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after[key] - before.get(key, 0.0)

    assert [r["client_request_id"] for r in rows] == ["m0", "m1", "m2", "m3"]
    assert [r["num_output_tokens"] for r in rows] == [2, 3, 4, 5]
    assert delta("vllm:generation_tokens_total") == 2 + 3 + 4 + 5
    assert delta("vllm:prompt_tokens_total") == 2 + 3 + 4 + 5
    assert delta("vllm:request_success_total", finished_reason="length") == 4
    assert delta("vllm:time_to_first_token_seconds_count") == 4
    assert delta("vllm:time_to_first_token_seconds_sum") == pytest.approx(sum(r["ttft_s"] for r in rows))
    assert delta("vllm:e2e_request_latency_seconds_sum") == pytest.approx(sum(r["e2e_s"] for r in rows))
    # Queue + prefill is TTFT, request by request, so their sums add up too.
    assert delta("vllm:request_queue_time_seconds_sum") + delta(
        "vllm:request_prefill_time_seconds_sum"
    ) == pytest.approx(sum(r["ttft_s"] for r in rows))
    assert delta("vllm:request_decode_time_seconds_sum") == pytest.approx(
        sum(r["last_token_s"] - r["first_token_s"] for r in rows)
    )
    assert delta("vllm:time_to_first_token_seconds_bucket", le="+Inf") == 4
    assert after[("vllm:num_requests_running", ())] == 0
    assert after[("vllm:kv_cache_usage_perc", ())] == 0.0
    assert delta("vllm:num_preemptions_total") == 0
    for r in rows:
        assert 0 < r["ttft_s"] <= r["e2e_s"]
        assert r["queue_s"] <= r["ttft_s"]
        assert r["tpot_s"] == pytest.approx(
            (r["last_token_s"] - r["first_token_s"]) / (r["num_output_tokens"] - 1)
        )


# -- pieces -----------------------------------------------------------------------------


def test_incremental_detokenizer_holds_back_split_characters(served):
    tokenizer = served[1].tokenizer
    text = "a€b é"
    ids = tokenizer.encode(text)
    detok = IncrementalDetokenizer(tokenizer)
    pieces = [detok.add([t]) for t in ids]
    assert pieces == ["a", "", "", "€", "b", " ", "", "é"]
    assert "".join(pieces) + detok.flush() == text


def test_checkpoint_chat_template_is_rendered(tmp_path):
    template = "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": template, "bos_token": {"content": "<s>"}})
    )
    render = compile_chat_template(*load_chat_template(tmp_path))
    assert render([{"role": "user", "content": "hi"}]) == "<s><|user|>hi<|assistant|>"
    assert load_chat_template(None)[0] == DEFAULT_CHAT_TEMPLATE


ROOT = Path(__file__).resolve().parent


def test_cli_reads_overrides_in_the_config_tree_names():
    options = parse_overrides(
        [
            "model=tiny",
            "engine.batching=static",
            "engine.max_batch_size=4",
            "port=9000",
            "request_log=r.jsonl",
        ]
    )
    engine = options["engine_options"]
    assert (engine["model"], engine["batching"], engine["max_batch_size"]) == ("tiny", "static", 4)
    assert engine["attention"] == "auto"  # the rest from scenarios/engine/reference.yaml
    assert (options["engine_name"], options["host"], options["port"]) == (
        "reference",
        "127.0.0.1",
        9000,
    )
    assert options["request_log"] == "r.jsonl" and options["api_key"] is None
    assert (
        parse_overrides(["model=tiny", f"model.path={ROOT}"])["engine_options"]["model"]
        == str(ROOT)
    )


@pytest.mark.parametrize("engine_name", ["openai", "nope"])
def test_build_server_refuses_an_engine_it_cannot_serve_naming_the_valid_ones(engine_name):
    message = f"engine='{engine_name}' cannot be served.*valid: reference, hf, synthetic$"
    with pytest.raises(ValueError, match=message):
        build_server({}, engine_name=engine_name)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["engine.bogus=1"], "engine.bogus"),
        (["engine=openai"], "valid: reference, hf, synthetic"),
        (["model=nope"], "model='nope': no such model; valid:"),
        (["port=http"], "port='http'"),
        (["tiny"], "malformed override 'tiny'"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_overrides(argv)
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("llmperf-serve: error: ") and err.count("\n") == 1


def test_cli_engine_whose_library_is_missing_is_one_line_and_exit_2(monkeypatch, capsys):
    def build_engine(options, model):
        raise ImportError("No module named 'transformers'")

    monkeypatch.setattr("llmperf.serve.server.build_engine", build_engine)
    with pytest.raises(SystemExit) as exit_info:
        main(["engine=hf"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "llmperf-serve: error: the engine is not available here: No module named 'transformers'\n"
    )


def test_a_dead_engine_fails_requests_and_health_with_503(served):
    _, server, _ = served

    class Dead:
        """Stands in for an engine whose step thread has died."""

        capabilities = EngineCapabilities(kv_stats=True, liveness=True)

        def __init__(self, engine):
            self.tokenizer, self.max_model_len, self.kv = (
                engine.tokenizer,
                engine.max_model_len,
                engine.kv,
            )

        def is_alive(self) -> bool:
            return False

    dead = OpenAIServer(Dead(server.engine), "tiny")
    with ServerThread(build_app(dead, manage_engine=False)) as running:
        response = httpx.post(
            f"{running.base_url}/completions", json={"model": "tiny", "prompt": "x"}
        )
        assert response.status_code == 503
        assert response.json()["error"]["message"].startswith("the engine has stopped")
        assert httpx.get(running.base_url.removesuffix("/v1") + "/health").status_code == 503
