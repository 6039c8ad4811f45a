"""Empty and mismatched answers, against a scripted server: a stream whose only chunk is an end
marker (text "", a finish reason) with usage completion_tokens 0 fails with "empty output";
an end marker after tokens is not a token; an end marker the usage counts is one; and a run
whose chunks outnumber the server's usage warns."""

from __future__ import annotations

import asyncio
import json

import pytest
from starlette.applications import Starlette
from starlette.requests import Request as HTTPRequest
from starlette.responses import StreamingResponse
from starlette.routing import Route

from engines.base import Request
from engines.openai_http import OpenAIEngine
from llmperf.measure.loadgen import LoadGenerator
from llmperf.measure.metrics import token_count_mismatches
from llmperf.measure.records import EMPTY_OUTPUT
from llmperf.measure.validity import token_counts_agree
from llmperf.run.config import ValidityConfig
from llmperf.serve.server import ServerThread


def sse(text: str | None, finish: str | None = None, usage: int | None = None) -> bytes:
    body: dict = {"id": "x", "object": "text_completion", "choices": []}
    if text is not None:
        body["choices"] = [{"index": 0, "text": text, "finish_reason": finish}]
    if usage is not None:
        body["usage"] = {"prompt_tokens": 1, "completion_tokens": usage, "total_tokens": usage + 1}
    return f"data: {json.dumps(body)}\n\n".encode()


SCRIPTS = {
    # the case: one chunk, empty text, finish_reason stop; usage 0
    "empty": [sse("", "stop"), sse(None, usage=0)],
    # three tokens, then an end marker of its own; usage 3
    "end-marker": [sse("a"), sse("b"), sse("c"), sse("", "length"), sse(None, usage=3)],
    # the last token's text is empty (a partial character) and comes with the finish reason;
    # usage counts it: 3
    "empty-last-token": [sse("a"), sse("b"), sse("", "length"), sse(None, usage=3)],
    # five chunks, usage says 2: the counts disagree
    "over-counted": [sse(t) for t in "abcd"] + [sse("e", "length"), sse(None, usage=2)],
}


async def scripted(http: HTTPRequest):
    script = SCRIPTS[(await http.json())["model"]]

    async def body():
        for chunk in script:
            yield chunk
        yield b"data: [DONE]\n\n"

    return StreamingResponse(body(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def server():
    app = Starlette(routes=[Route("/v1/completions", scripted, methods=["POST"])])
    with ServerThread(app) as running:
        yield running.base_url


@pytest.fixture(params=["aiohttp", "httpx"])
def record_of(server, request):
    def run(script: str):
        engine = OpenAIEngine(model=script, base_url=server, transport=request.param)
        records = []
        try:
            asyncio.run(LoadGenerator(engine, records.append).run(
                [], [Request(id=script, max_tokens=4, prompt_text="x")]))
        finally:
            engine.stop()
        [record] = records
        return record
    return run


def test_a_zero_token_answer_fails_with_empty_output(record_of):
    record = record_of("empty")
    assert record.error == EMPTY_OUTPUT and not record.ok
    assert record.output_tokens == 0 and record.token_times_s == []
    assert record.first_token_s is None


def test_an_end_marker_after_the_tokens_is_not_a_token(record_of):
    record = record_of("end-marker")
    assert record.error is None and record.output_tokens == 3
    assert len(record.token_times_s) == 3  # three arrivals: ITL has two gaps, not three


def test_an_empty_last_token_that_the_usage_counts_is_a_token(record_of):
    record = record_of("empty-last-token")
    assert record.error is None and record.output_tokens == 3
    assert len(record.token_times_s) == 3


def test_chunks_beyond_the_servers_usage_make_the_run_warn(record_of):
    over, fine = record_of("over-counted"), record_of("end-marker")
    assert (over.output_tokens, len(over.token_times_s)) == (2, 5)
    figures = token_count_mismatches([over, fine])
    assert figures == {"num_token_count_mismatches": 1}
    check = token_counts_agree(figures, ValidityConfig())
    assert (check.ok, check.blocking) == (False, False)
    assert check.detail.startswith("1 request streamed more token chunks than the server's usage counts")
    assert token_counts_agree(token_count_mismatches([fine]), ValidityConfig()).ok
