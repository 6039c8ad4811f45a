"""engine.endpoint=responses: OpenAI's Responses API. A stream recorded from the public spec
parses to the records it should; llmperf-serve serves /v1/responses, and the official
`openai` client reads from it the same text and usage llmperf records; an error event fails
its request with the server's message and the run goes on."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from engines.openai_http import OpenAIEngine
from llmperf.serve.app import build_app
from llmperf.serve.server import ServerThread, build_server
from tests.typed_api_helpers import FIXTURES, Scripted, records_of, text_requests

REASONING = 3


@pytest.fixture(scope="module")
def serve():
    server = build_server({"model": "syn", "tpot_s": 0.002, "reasoning_tokens": REASONING},
                          engine_name="synthetic")
    with ServerThread(build_app(server)) as running:
        yield running.base_url


def test_the_recorded_spec_stream_parses_to_its_tokens_reasoning_and_usage():
    stream = (FIXTURES / "responses_stream.sse").read_bytes()
    scripted = Scripted(lambda body: stream)
    with scripted.serve() as running:
        (record,) = records_of(running.base_url, text_requests(1), endpoint="responses")
    assert record.error is None and record.finish_reason == "stop"
    # five deltas: two reasoning, three answer; the counts are the usage's, but the reasoning
    # tokens are the client tokenizer's (bytes here), as for chat's reasoning_content chunks
    assert len(record.token_times_s) == 5
    assert record.reasoning_tokens == len(b"Let me think")
    assert record.first_answer_token_s == record.token_times_s[2]
    assert (record.input_tokens, record.output_tokens) == (12, 5)
    assert record.token_count_source == "server usage"
    path, headers, body = scripted.seen[0]
    assert path == "/v1/responses" and headers["authorization"] == "Bearer EMPTY"
    assert body.startswith(b'{"model":"m","input":"hello there","max_output_tokens":8,')


def test_an_error_event_fails_that_request_with_the_servers_message_and_the_run_goes_on():
    good = (FIXTURES / "responses_stream.sse").read_bytes()
    bad = (b'event: response.created\ndata: {"type":"response.created","response":{}}\n\n'
           b'event: error\ndata: {"type":"error","code":"server_error","message":"the GPU fell over",'
           b'"param":null}\n\n')
    calls = iter([bad, good, good])
    with Scripted(lambda body: next(calls)).serve() as running:
        records = records_of(running.base_url, text_requests(3), endpoint="responses")
    assert records[0].finish_reason == "error" and "the GPU fell over" in records[0].error
    assert [r.error for r in records[1:]] == [None, None]
    assert [r.output_tokens for r in records[1:]] == [5, 5]


def test_responses_over_llmperf_serve_match_chat_token_for_token(serve):
    chat = records_of(serve, text_requests(3), model="syn", endpoint="chat")
    responses = records_of(serve, text_requests(3), model="syn", endpoint="responses")
    for c, r in zip(chat, responses, strict=True):
        assert r.error is None and r.finish_reason == "length"
        assert (r.input_tokens, r.output_tokens, r.reasoning_tokens) == (c.input_tokens, 8, REASONING)
        assert len(r.token_times_s) == len(c.token_times_s) == 8
        assert r.first_answer_token_s == r.token_times_s[REASONING]


def test_a_whole_response_counts_from_its_usage(serve):
    (record,) = records_of(serve, text_requests(1), model="syn", endpoint="responses", stream=False)
    assert record.error is None and record.response == "whole"
    assert record.output_tokens == 8 and record.token_times_s == []


def test_the_official_openai_client_reads_the_text_and_usage_llmperf_records(serve):
    """Both read one stream llmperf-serve sent (replayed), so the texts must be equal."""
    openai = pytest.importorskip("openai")
    body = {"model": "syn", "input": "hello there", "max_output_tokens": 8, "temperature": 0.0,
            "stream": True, "ignore_eos": True}
    recorded = httpx.post(f"{serve}/responses", json=body, timeout=30).content
    with Scripted(lambda body: recorded).serve() as running:
        client = openai.OpenAI(base_url=running.base_url, api_key="-")
        text, reasoning, usage = "", "", None
        for event in client.responses.create(model="syn", input="hello there", stream=True):
            if event.type == "response.output_text.delta":
                text += event.delta
            elif event.type == "response.reasoning_text.delta":
                reasoning += event.delta
            elif event.type == "response.incomplete":  # max_output_tokens ended it
                usage = event.response.usage
        engine = OpenAIEngine("syn", base_url=running.base_url, endpoint="responses", metrics_url="off")
        seen = asyncio.run(_events(engine))
        engine.stop()
    final = seen[-1]
    assert text == "".join(e.text for e in seen if e.token_ids and not e.reasoning)
    assert reasoning == "".join(e.text for e in seen if e.reasoning)
    assert len(text) + len(reasoning) == 8  # the synthetic engine's tokens are one byte each
    assert (usage.input_tokens, usage.output_tokens) == (final.num_prompt_tokens, final.num_output_tokens)
    assert usage.output_tokens == 8 and usage.output_tokens_details.reasoning_tokens == REASONING


def test_the_official_openai_client_reads_llmperf_serves_whole_response(serve):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=serve, api_key="-")
    whole = client.responses.create(model="syn", input="hello there", max_output_tokens=8,
                                    temperature=0.0, extra_body={"ignore_eos": True})
    (record,) = records_of(serve, text_requests(1), model="syn", endpoint="responses", stream=False)
    assert whole.status == "incomplete" and whole.incomplete_details.reason == "max_output_tokens"
    assert len(whole.output_text) == 8 - REASONING
    assert (whole.usage.input_tokens, whole.usage.output_tokens) == (record.input_tokens, record.output_tokens)


async def _events(engine):
    return [e async for e in engine.stream(text_requests(1)[0])]
