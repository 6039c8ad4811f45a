"""engine=hf: transformers' generate on the reference engine's weights, its own static batches,
a timestamp per token from a streamer."""

from __future__ import annotations

import asyncio

import pytest
from hf_checkpoints import make_hf_llama

from engines.base import Request, SamplingParams
from engines.hf import HFEngine
from engines.reference import ReferenceEngine

PROMPTS = [
    [5, 6, 7, 8, 9],
    [10, 11, 12],
    [40, 41, 42, 43, 44, 45, 46, 47],
    [100] * 20,
    [7, 7],
    [300, 200, 100],
]
MAX_TOKENS = 12
GREEDY_EXACT = SamplingParams(temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def reference():
    return ReferenceEngine(model="tiny", num_kv_blocks=128, max_model_len=256)


@pytest.fixture(scope="module")
def hf():
    engine = HFEngine(model="tiny", max_batch_size=4, max_model_len=256)
    engine.start()
    yield engine
    engine.stop()


def stream_all(engine, requests):
    async def one(request):
        return [event async for event in engine.stream(request)]

    async def run_all():
        return await asyncio.gather(*(one(r) for r in requests))

    return asyncio.run(run_all())


def stream_queued(engine, requests):
    """Stream with every request queued before the engine looks: batches are then deterministic."""
    engine.stop()

    async def one(request):
        return [event async for event in engine.stream(request)]

    async def run_all():
        tasks = [asyncio.create_task(one(r)) for r in requests]
        while len(engine._inbox) < len(requests):
            await asyncio.sleep(0.001)
        engine.start()
        return await asyncio.gather(*tasks)

    return asyncio.run(run_all())


def requests_for(prompts, max_tokens, sampling=GREEDY_EXACT, prefix="r"):
    return [
        Request(id=f"{prefix}{i}", max_tokens=n, prompt_token_ids=p, sampling=sampling)
        for i, (p, n) in enumerate(zip(prompts, max_tokens, strict=True))
    ]


def test_greedy_output_equals_the_reference_engine_on_tiny(hf, reference):
    expected = [
        out.token_ids for out in reference.generate(PROMPTS, max_tokens=MAX_TOKENS, ignore_eos=True)
    ]
    results = stream_all(hf, requests_for(PROMPTS, [MAX_TOKENS] * len(PROMPTS)))
    got = [[t for e in events for t in e.token_ids] for events in results]
    assert got == expected


def test_each_token_is_an_event_with_its_time_and_the_last_one_finishes(hf):
    max_tokens = [3, 7, 5, 1]  # one batch; rows stop at their own lengths
    hf._steps.clear()
    results = stream_queued(hf, requests_for(PROMPTS[:4], max_tokens))
    for events, n, prompt in zip(results, max_tokens, PROMPTS, strict=False):
        assert len(events) == n and all(len(e.token_ids) == 1 for e in events)
        assert [e.finished for e in events] == [False] * (n - 1) + [True]
        final = events[-1]
        assert (final.finish_reason, final.num_output_tokens, final.num_prompt_tokens) == (
            "length",
            n,
            len(prompt),
        )
        times = [e.time_s for e in events]
        assert times == sorted(times)
        assert events[0].scheduled_s is not None and events[0].scheduled_s < events[0].time_s
    steps = hf.step_stats()
    assert [s.kind for s in steps] == ["prefill"] + [
        "decode"
    ] * 6  # the batch runs to its longest row
    lengths = [len(p) for p in PROMPTS[:4]]
    assert steps[0].num_prefill_tokens == sum(lengths)
    assert steps[0].padded_tokens == 4 * max(lengths) - sum(lengths)
    assert [s.num_seqs for s in steps] == [
        4,
        3,
        3,
        2,
        2,
        1,
        1,
    ]  # rows still running entering each step
    assert [s.padded_tokens for s in steps[1:]] == [
        1,
        1,
        2,
        2,
        3,
        3,
    ]  # finished rows still computed
    assert (
        results[3][0].time_s == steps[0].start_s + steps[0].duration_s
    )  # the prefill ends at the first tokens


def test_kv_positions_read_count_each_rows_real_tokens_not_its_padding(hf):
    """A left-padded row holds its own prompt and outputs in the KV cache; padding slots and
    rows that already finished hold nothing the roofline should count as read."""
    max_tokens = [3, 7, 5, 1]
    hf._steps.clear()
    stream_queued(hf, requests_for(PROMPTS[:4], max_tokens, prefix="kv"))
    steps = hf.step_stats()
    lengths = [len(p) for p in PROMPTS[:4]]  # 5, 3, 8, 20
    # step k (0 = prefill) attends, for each row still running, its prompt + k tokens
    expected = [sum(n + k for n, m in zip(lengths, max_tokens, strict=True) if m > k) for k in range(7)]
    # by hand: 5+3+8+20, 6+4+9, 7+5+10, 6+11, 7+12, 8, 9 (padded, 4 x (20 + k) each)
    assert expected == [36, 19, 22, 17, 19, 8, 9]
    assert [s.context_tokens for s in steps] == expected


def test_waiting_requests_form_batches_of_at_most_max_batch_size(hf):
    hf._steps.clear()
    stream_queued(hf, requests_for(PROMPTS, [2] * len(PROMPTS), prefix="b"))
    assert [s.num_seqs for s in hf.step_stats() if s.kind == "prefill"] == [4, 2]


def test_a_stop_token_ends_its_row_with_stop(hf, reference):
    greedy = reference.generate([PROMPTS[0]], max_tokens=MAX_TOKENS, ignore_eos=True)[0].token_ids
    stop_at = greedy[2]
    sampling = SamplingParams(temperature=0.0, stop_token_ids=(stop_at,))
    other_greedy = reference.generate([PROMPTS[1]], max_tokens=4, ignore_eos=True)[0].token_ids
    assert stop_at not in other_greedy  # the other row of the batch runs to its length
    [events, other] = stream_queued(hf, requests_for(PROMPTS[:2], [MAX_TOKENS, 4], sampling))
    cut = greedy.index(stop_at) + 1
    assert [t for e in events for t in e.token_ids] == greedy[:cut]
    assert events[-1].finish_reason == "stop"
    assert [t for e in other for t in e.token_ids] == other_greedy
    assert other[-1].finish_reason == "length"


EOS_PROMPT = [507, 75, 423, 446]  # tiny's greedy continuation reaches EOS (2) at its 7th token


@pytest.mark.parametrize("max_batch_size", [1, 4])
def test_eos_ends_a_row_unless_ignore_eos(reference, max_batch_size):
    greedy = reference.generate([EOS_PROMPT, PROMPTS[0]], max_tokens=MAX_TOKENS, ignore_eos=True)
    eos_at = greedy[0].token_ids.index(2) + 1
    assert eos_at < MAX_TOKENS
    engine = HFEngine(model="tiny", max_batch_size=max_batch_size, max_model_len=256)
    engine.start()
    try:
        ignoring = stream_queued(engine, requests_for([EOS_PROMPT, PROMPTS[0]], [MAX_TOKENS] * 2))
        stopping = stream_queued(
            engine, requests_for([EOS_PROMPT, PROMPTS[0]], [MAX_TOKENS] * 2, SamplingParams())
        )
    finally:
        engine.stop()
    tokens = [[t for e in events for t in e.token_ids] for events in ignoring + stopping]
    assert tokens == [
        greedy[0].token_ids,
        greedy[1].token_ids,
        greedy[0].token_ids[:eos_at],
        greedy[1].token_ids,
    ]
    assert [events[-1].finish_reason for events in ignoring + stopping] == [
        "length",
        "length",
        "stop",
        "length",
    ]


def test_abort_drops_a_running_request_and_the_batch_goes_on(hf):
    async def run():
        long = Request(id="long", max_tokens=200, prompt_token_ids=[9, 9, 9], sampling=GREEDY_EXACT)
        short = Request(id="short", max_tokens=5, prompt_token_ids=[8, 8], sampling=GREEDY_EXACT)
        short_task = asyncio.create_task(collect(short))
        events = []
        async for event in hf.stream(long):
            events.append(event)
            if len(events) == 2:
                hf.abort("long")
        return events, await short_task

    async def collect(request):
        return [e async for e in hf.stream(request)]

    long_events, short_events = asyncio.run(run())
    assert long_events[-1].finish_reason == "abort" and len(long_events) < 200
    assert short_events[-1].finish_reason == "length" and short_events[-1].num_output_tokens == 5


def test_a_request_that_cannot_fit_is_an_error_event(hf):
    [events] = stream_all(hf, [Request(id="big", max_tokens=250, prompt_token_ids=[5] * 10)])
    assert events[-1].finish_reason == "error" and "exceeds max_model_len (256)" in events[-1].error


def test_checkpoint_folder_matches_the_reference_engine(tmp_path):
    make_hf_llama(tmp_path, num_hidden_layers=2, tie_word_embeddings=True)
    prompts = [[5, 6, 7], [20, 21, 22, 23, 24, 25]]
    reference = ReferenceEngine(model=str(tmp_path), num_kv_blocks=32, max_model_len=128)
    expected = [o.token_ids for o in reference.generate(prompts, max_tokens=8, ignore_eos=True)]
    engine = HFEngine(model=str(tmp_path), max_batch_size=2, max_model_len=128)
    engine.start()
    try:
        results = stream_all(engine, requests_for(prompts, [8, 8]))
    finally:
        engine.stop()
    assert [[t for e in events for t in e.token_ids] for events in results] == expected


def test_sampling_is_seeded(hf):
    sampling = SamplingParams(temperature=1.0, top_k=50, seed=7, ignore_eos=True)
    first, second = (stream_all(hf, requests_for([PROMPTS[0]], [8], sampling)) for _ in range(2))
    tokens = [[t for e in events for t in e.token_ids] for events in (first[0], second[0])]
    assert tokens[0] == tokens[1] and len(tokens[0]) == 8


def test_a_seed_torch_cannot_take_fails_its_batch_not_the_engine():
    engine = HFEngine(model="tiny", max_batch_size=2, max_model_len=64, seed=2**62)
    engine.start()
    try:
        sampled = requests_for([[5, 6]], [3], SamplingParams(temperature=1.0), prefix="s")
        greedy = requests_for([[5, 6]], [3], GREEDY_EXACT, prefix="g")
        [failed] = stream_all(engine, sampled)  # 2**62 * 1_000_003 overflows torch's seed
        [served] = stream_all(engine, greedy)
    finally:
        engine.stop()
    assert failed[-1].finish_reason == "error" and "Overflow" in failed[-1].error
    assert served[-1].finish_reason == "length" and served[-1].num_output_tokens == 3
    assert engine.is_alive()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dying_generate_loop_fails_requests_instead_of_hanging(monkeypatch):
    engine = HFEngine(model="tiny", max_batch_size=2, max_model_len=64)

    def crash(batch):
        raise RuntimeError("boom")

    monkeypatch.setattr(engine, "_run_batch", crash)
    engine.start()
    try:
        [first] = stream_all(engine, requests_for([[5, 6]], [3], prefix="a"))
        engine._thread.join(timeout=10)
        [later] = stream_all(engine, requests_for([[5, 6]], [3], prefix="b"))
    finally:
        engine.stop()
    message = "the engine's generate loop died: RuntimeError: boom"
    assert first[-1].finish_reason == "error" and first[-1].error == message
    assert later == [later[-1]] and later[-1].error == message
    assert not engine.is_alive()


def test_a_seed_out_of_torch_range_is_refused():
    for seed in (2**64, -(2**63) - 1):
        with pytest.raises(ValueError, match="seed must be in"):
            SamplingParams(temperature=1.0, seed=seed)
    assert SamplingParams(seed=2**64 - 1).seed == 2**64 - 1


def test_bad_options_name_the_valid_choices():
    with pytest.raises(ValueError, match="valid: fp32, bf16, fp16"):
        HFEngine(model="tiny", precision="int3")
    with pytest.raises(ValueError, match="max_batch_size=0: must be > 0"):
        HFEngine(model="tiny", max_batch_size=0)


def test_llmperf_serve_serves_the_hf_engine():
    import openai

    from llmperf.serve.app import build_app
    from llmperf.serve.server import ServerThread, build_server

    server = build_server(
        {"model": "tiny", "max_batch_size": 2, "max_model_len": 64}, engine_name="hf"
    )
    with ServerThread(build_app(server)) as running:
        client = openai.OpenAI(base_url=running.base_url, api_key="-", max_retries=0)
        out = client.completions.create(
            model="tiny",
            prompt=[5, 6, 7],
            max_tokens=3,
            temperature=0,
            extra_body={"ignore_eos": True},
        )
    assert out.usage.completion_tokens == 3
    assert out.choices[0].finish_reason == "length"
