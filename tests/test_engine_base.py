"""The engine seam's shared pieces: prompt ids, request checks, context length, event delivery."""

from __future__ import annotations

import asyncio

import pytest

from engines.base import Request, TokenEvent, request_error, resolve_max_model_len
from engines.channel import EventChannel
from engines.synthetic import ByteTokenizer, SyntheticEngine


def test_prompt_ids_are_the_given_ids_even_empty_else_the_encoded_text():
    tokenizer = ByteTokenizer()
    given = Request("a", 1, prompt_token_ids=[5, 6], prompt_text="xyz")
    assert given.prompt_ids(tokenizer) == [5, 6]
    assert Request("b", 1, prompt_token_ids=[], prompt_text="xyz").prompt_ids(tokenizer) == []
    assert Request("c", 1, prompt_text="hi").prompt_ids(tokenizer) == [104, 105]


@pytest.mark.parametrize(
    ("ids", "max_tokens", "error"),
    [
        ([1, 2, 3], 5, None),
        ([1, 2, 3], 7, None),  # exactly max_model_len
        ([], 5, "the prompt is empty"),
        ([1, 100, -1], 5, "token id 100 is outside the vocabulary (size 100)"),
        ([1, 2, 3], 8, "prompt (3 tokens) + max_tokens (8) exceeds max_model_len (10)"),
    ],
)
def test_request_error_says_why_a_request_cannot_run(ids, max_tokens, error):
    assert request_error(ids, max_tokens, vocab_size=100, max_model_len=10) == error


def test_max_model_len_defaults_to_4096_and_never_exceeds_the_model():
    assert resolve_max_model_len(limit=32768, requested=None) == 4096
    assert resolve_max_model_len(limit=2048, requested=None) == 2048
    assert resolve_max_model_len(limit=2048, requested=512) == 512
    assert resolve_max_model_len(limit=2048, requested=8192) == 2048


def test_synthetic_engine_counts_an_empty_prompt_as_zero_tokens():
    engine = SyntheticEngine()
    engine.start()

    async def run():
        request = Request("e", 2, prompt_token_ids=[], prompt_text=None)
        return [event async for event in engine.stream(request)]

    events = asyncio.run(run())
    assert events[-1].num_prompt_tokens == 0 and events[-1].num_output_tokens == 2


def test_an_event_for_a_closed_loop_is_dropped_not_raised():
    class ClosesMeanwhile:
        """The caller's loop closing between an is_closed() check and the call."""

        def is_closed(self) -> bool:
            return False

        def call_soon_threadsafe(self, *args):
            raise RuntimeError("Event loop is closed")

    async def make():
        return EventChannel()

    loop = asyncio.new_event_loop()
    channel = loop.run_until_complete(make())
    loop.close()
    channel.deliver(TokenEvent("late", (1,), 0.0))  # the engine thread must not die of it
    channel._loop = ClosesMeanwhile()
    channel.deliver(TokenEvent("late", (2,), 0.0))
    assert channel._queue.empty()
