"""Reasoning output counted apart from the answer: token counts and both first-token times."""

from __future__ import annotations

import asyncio

import pytest

from engines.base import Request
from engines.openai_stream import StreamState
from engines.synthetic import ByteTokenizer, SyntheticEngine
from llmperf.measure.loadgen import LoadGenerator
from llmperf.measure.metrics import compute_metrics
from llmperf.run.config import SloConfig

TTFT_S, TPOT_S, REASONING, OUTPUT = 0.02, 0.01, 6, 10


def test_synthetic_stream_with_a_known_split_gives_exact_counts_and_first_token_times():
    engine = SyntheticEngine(ttft_s=TTFT_S, tpot_s=TPOT_S, reasoning_tokens=REASONING)
    records = []
    requests = [Request(id=str(i), max_tokens=OUTPUT, prompt_token_ids=[1, 2, 3], arrival_s=0.05 * i)
                for i in range(4)]
    engine.start()
    try:
        asyncio.run(LoadGenerator(engine, records.append).run([], requests))
    finally:
        engine.stop()
    for r in records:
        assert r.output_tokens == OUTPUT and r.reasoning_tokens == REASONING
        # The first token of any kind is the first reasoning token; the first answer token
        # is the token after the last reasoning one, REASONING steps later.
        assert r.first_answer_token_s == r.token_times_s[REASONING]
        assert r.first_token_s == r.token_times_s[0]
        # REASONING decode steps of TPOT_S each (a busy machine can only stretch them).
        answer_gap_s = r.first_answer_token_s - r.first_token_s
        assert 0.9 * REASONING * TPOT_S <= answer_gap_s < 3 * REASONING * TPOT_S
    summary = compute_metrics(records, SloConfig())
    assert summary["reasoning_tokens_total"] == 4 * REASONING
    assert summary["answer_tokens_total"] == 4 * (OUTPUT - REASONING)
    by_hand = sum(r.first_answer_token_s - r.arrival_s for r in records) / len(records)
    assert summary["ttft_answer_s"]["mean"] == pytest.approx(by_hand, rel=1e-9)


def test_without_reasoning_the_first_answer_token_is_the_first_token():
    engine = SyntheticEngine(tpot_s=0.001)
    records = []
    engine.start()
    try:
        asyncio.run(LoadGenerator(engine, records.append).run(
            [], [Request(id="a", max_tokens=3, prompt_token_ids=[1])]))
    finally:
        engine.stop()
    assert records[0].reasoning_tokens == 0
    assert records[0].first_answer_token_s == records[0].first_token_s


def chat_chunk(**delta):
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_openai_reasoning_deltas_are_events_marked_as_reasoning(field):
    state = StreamState(Request(id="r", max_tokens=8, prompt_token_ids=[1]))
    tok = ByteTokenizer()
    events = []
    for i, chunk in enumerate([
        chat_chunk(role="assistant", content=""),
        chat_chunk(**{field: "hmm"}),
        chat_chunk(**{field: " ok", "content": None}),
        chat_chunk(content="Yes"),
    ]):
        events += state.on_chunk(chunk, float(i), tok)
    assert [(e.text, e.reasoning, e.time_s) for e in events] == [
        ("hmm", True, 1.0), (" ok", True, 2.0), ("Yes", False, 3.0)]
    assert [len(e.token_ids) for e in events] == [3, 3, 3]


def test_multi_token_chunks_count_as_their_tokens_and_itl_is_given_per_chunk_and_per_token():
    from llmperf.measure.records import RequestRecord
    from tests.fakes import ScriptedEngine

    engine = ScriptedEngine(lambda request: [(0.01, 1), (0.01, 3), (0.01, 2)])
    records = []
    asyncio.run(LoadGenerator(engine, records.append).run(
        [], [Request(id="c", max_tokens=6, prompt_token_ids=[1])]))
    assert records[0].output_tokens == 6 and records[0].chunk_tokens == [1, 3, 2]
    assert len(records[0].token_times_s) == 3

    # Chunks of 1, 3 and 2 tokens at 0.10, 0.16 and 0.20 s: per-chunk gaps 60 and 40 ms;
    # per token 20 ms three times, then 20 ms twice.
    record = RequestRecord(id="a", arrival_s=0.0, dispatch_s=0.0, first_token_s=0.1, end_s=0.2,
                           token_times_s=[0.10, 0.16, 0.20], output_tokens=6,
                           chunk_tokens=[1, 3, 2], finish_reason="length")
    summary = compute_metrics([record], SloConfig())
    assert summary["itl_s"]["mean"] == pytest.approx(0.05)
    assert summary["itl_per_token_s"]["mean"] == pytest.approx(0.02)
    assert summary["itl_per_token_s"]["max"] == pytest.approx(0.02)
    assert summary["tpot_s"]["mean"] == pytest.approx(0.1 / 5)
