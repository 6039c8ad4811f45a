"""engine.endpoint=messages: Anthropic's Messages API. A stream recorded from the public spec
parses to the records it should, with the key as x-api-key and an anthropic-version header;
llmperf-serve serves /v1/messages, and the official `anthropic` client reads from it the same
text and usage llmperf records."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from engines.openai_http import OpenAIEngine
from llmperf.serve.app import build_app
from llmperf.serve.server import ServerThread, build_server
from tests.typed_api_helpers import FIXTURES, Scripted, records_of, text_requests

REASONING = 2


@pytest.fixture(scope="module")
def serve():
    server = build_server({"model": "syn", "tpot_s": 0.002, "reasoning_tokens": REASONING},
                          engine_name="synthetic", api_key="sk-ant-test")
    with ServerThread(build_app(server)) as running:
        yield running.base_url


def test_the_recorded_spec_stream_parses_to_its_tokens_thinking_and_usage():
    stream = (FIXTURES / "messages_stream.sse").read_bytes()
    scripted = Scripted(lambda body: stream)
    with scripted.serve() as running:
        (record,) = records_of(running.base_url, text_requests(1), endpoint="messages",
                               api_key="sk-ant-secret", anthropic_version="2023-06-01")
    # four deltas (two thinking, two text; the signature delta is none), stop_reason
    # max_tokens, input from message_start, output from message_delta
    assert record.error is None and record.finish_reason == "length"
    assert len(record.token_times_s) == 4
    assert record.reasoning_tokens == len(b"Two plus two")  # the client's byte tokenizer
    assert record.first_answer_token_s == record.token_times_s[2]
    assert (record.input_tokens, record.output_tokens) == (25, 4)
    path, headers, body = scripted.seen[0]
    assert path == "/v1/messages"
    assert headers["x-api-key"] == "sk-ant-secret" and headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in headers
    assert body.startswith(b'{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hello there"}],')


def test_an_error_event_fails_that_request_with_the_servers_message():
    bad = (b'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":3}}}\n\n'
           b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n')
    good = (FIXTURES / "messages_stream.sse").read_bytes()
    calls = iter([bad, good])
    with Scripted(lambda body: next(calls)).serve() as running:
        records = records_of(running.base_url, text_requests(2), endpoint="messages")
    assert records[0].finish_reason == "error" and records[0].error.endswith("Overloaded")
    assert records[1].error is None and records[1].output_tokens == 4


def test_messages_over_llmperf_serve_match_chat_token_for_token(serve):
    chat = records_of(serve, text_requests(3), model="syn", endpoint="chat", api_key="sk-ant-test")
    messages = records_of(serve, text_requests(3), model="syn", endpoint="messages", api_key="sk-ant-test")
    for c, m in zip(chat, messages, strict=True):
        assert m.error is None and m.finish_reason == "length"
        assert (m.input_tokens, m.output_tokens, m.reasoning_tokens) == (c.input_tokens, 8, REASONING)
        assert len(m.token_times_s) == 8 and m.first_answer_token_s == m.token_times_s[REASONING]
    (whole,) = records_of(serve, text_requests(1), model="syn", endpoint="messages", stream=False,
                          api_key="sk-ant-test")
    assert whole.error is None and whole.output_tokens == 8 and whole.response == "whole"


def test_the_official_anthropic_client_reads_the_text_and_usage_llmperf_records(serve):
    """Both read one stream llmperf-serve sent (replayed), so the texts must be equal."""
    anthropic = pytest.importorskip("anthropic")
    body = {"model": "syn", "max_tokens": 8, "messages": [{"role": "user", "content": "hello there"}],
            "temperature": 0.0, "stream": True, "ignore_eos": True}
    recorded = httpx.post(f"{serve}/messages", json=body, headers={"x-api-key": "sk-ant-test"},
                          timeout=30).content
    with Scripted(lambda body: recorded).serve() as running:
        client = anthropic.Anthropic(base_url=running.base_url.removesuffix("/v1"), api_key="sk-ant-test")
        with client.messages.stream(model="syn", max_tokens=8,
                                    messages=[{"role": "user", "content": "hello there"}]) as stream:
            text = "".join(stream.text_stream)
            message = stream.get_final_message()
        engine = OpenAIEngine("syn", base_url=running.base_url, endpoint="messages", metrics_url="off")
        seen = asyncio.run(_events(engine))
        engine.stop()
    final = seen[-1]
    thinking = "".join(b.thinking for b in message.content if b.type == "thinking")
    assert text == "".join(e.text for e in seen if e.token_ids and not e.reasoning)
    assert thinking == "".join(e.text for e in seen if e.reasoning)
    assert len(text) + len(thinking) == 8  # the synthetic engine's tokens are one byte each
    assert message.stop_reason == "max_tokens"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (
        final.num_prompt_tokens, final.num_output_tokens)


def test_the_official_anthropic_client_reads_a_whole_message_and_the_key_is_checked(serve):
    anthropic = pytest.importorskip("anthropic")
    client = anthropic.Anthropic(base_url=serve.removesuffix("/v1"), api_key="sk-ant-test")
    message = client.messages.create(model="syn", max_tokens=8,
                                     messages=[{"role": "user", "content": "hello there"}],
                                     extra_body={"ignore_eos": True})
    assert message.usage.output_tokens == 8 and message.stop_reason == "max_tokens"
    assert len(message.content[-1].text) == 8 - REASONING
    wrong = anthropic.Anthropic(base_url=serve.removesuffix("/v1"), api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        wrong.messages.create(model="syn", max_tokens=8, messages=[{"role": "user", "content": "hi"}])


async def _events(engine):
    return [e async for e in engine.stream(text_requests(1)[0])]
