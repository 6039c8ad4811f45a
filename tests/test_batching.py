"""Batching strategies and KV caches: same greedy tokens whatever the schedule."""

from __future__ import annotations

import asyncio
import random
import threading

import pytest

from engines.base import Request, SamplingParams
from engines.reference import ReferenceEngine
from engines.reference.scheduler import SCHEDULERS

STRATEGIES = list(SCHEDULERS)
CACHES = ["contiguous", "paged"]


def mixed_prompts(n=32, seed=0):
    rng = random.Random(seed)
    return [[rng.randrange(3, 512) for _ in range(rng.randint(1, 120))] for _ in range(n)]


PROMPTS = mixed_prompts()
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def expected():
    """The foundation's answer: each prompt generated alone."""
    eng = ReferenceEngine(model="tiny", batching="sequential", kv_cache="contiguous", max_num_seqs=1)
    return [eng.generate([p], max_tokens=MAX_TOKENS)[0].token_ids for p in PROMPTS]


def engine(batching, kv_cache, **kw):
    opts = dict(max_batch_size=8, max_num_seqs=16, max_num_batched_tokens=64, max_model_len=256)
    opts.update(kw)
    return ReferenceEngine(model="tiny", batching=batching, kv_cache=kv_cache, **opts)


@pytest.mark.parametrize("kv_cache", CACHES)
@pytest.mark.parametrize("batching", STRATEGIES)
def test_greedy_outputs_identical_for_every_strategy_and_cache(batching, kv_cache, expected):
    eng = engine(batching, kv_cache)
    outs = eng.generate(PROMPTS, max_tokens=MAX_TOKENS)
    assert [o.token_ids for o in outs] == expected
    steps = eng.step_stats()
    assert sum(s.num_decode_tokens + s.num_prefill_tokens for s in steps) >= sum(map(len, PROMPTS))
    if batching in ("continuous", "chunked", "static", "dynamic"):
        assert max(s.num_seqs for s in steps) > 1
    if batching == "chunked":
        assert max(s.num_prefill_tokens + s.num_decode_tokens for s in steps) <= 64
        assert any(s.kind == "mixed" for s in steps)


@pytest.mark.parametrize("batching", ["continuous", "chunked", "static", "sequential"])
def test_small_kv_pool_preempts_and_still_completes_every_request(batching, expected):
    # The workload needs 32 x (prompt + 24) positions at once; give a quarter of the blocks it would use.
    needed_blocks = sum(-(-(len(p) + MAX_TOKENS) // 16) for p in PROMPTS)
    eng = engine(batching, "paged", num_kv_blocks=needed_blocks // 4, max_num_seqs=32, max_batch_size=32)
    outs = eng.generate(PROMPTS, max_tokens=MAX_TOKENS)
    assert [o.token_ids for o in outs] == expected
    preemptions = sum(s.preemptions for s in eng.step_stats())
    assert preemptions == sum(o.num_preemptions for o in outs)
    if batching != "sequential":
        assert preemptions > 0
    assert eng.kv.num_free_blocks == eng.kv.num_blocks


def test_contiguous_cache_with_few_slots_queues_instead_of_failing(expected):
    eng = engine("continuous", "contiguous", num_kv_blocks=3 * 16, max_num_seqs=32)
    assert eng.kv.num_slots == 3
    outs = eng.generate(PROMPTS, max_tokens=MAX_TOKENS)
    assert [o.token_ids for o in outs] == expected
    assert max(s.num_seqs for s in eng.step_stats()) == 3


@pytest.mark.parametrize("batching", ["continuous", "chunked"])
def test_prefix_caching_computes_shared_blocks_once(batching):
    rng = random.Random(3)
    prefix = [rng.randrange(3, 512) for _ in range(96)]  # six full blocks of 16
    prompts = [prefix + [rng.randrange(3, 512) for _ in range(rng.randint(1, 20))] for _ in range(6)]
    plain = engine(batching, "paged").generate(prompts, max_tokens=12)
    eng = engine(batching, "paged", enable_prefix_caching=True, max_num_seqs=1)
    cached = eng.generate(prompts, max_tokens=12)
    assert [o.token_ids for o in cached] == [o.token_ids for o in plain]
    # The first request computes the prefix; the five others find its six blocks.
    assert [o.num_cached_prompt_tokens for o in cached] == [0] + [96] * 5
    assert eng.kv.stats()["prefix_cache_hit_tokens"] == 5 * 96
    assert sum(s.prefix_cache_hit_tokens for s in eng.step_stats()) == 5 * 96
    computed = sum(s.num_prefill_tokens for s in eng.step_stats())
    assert computed == sum(map(len, prompts)) - 5 * 96


def test_prefix_hits_per_step_count_each_admission_once_under_preemption():
    rng = random.Random(5)
    prefix = [rng.randrange(3, 512) for _ in range(64)]
    prompts = [prefix + [rng.randrange(3, 512) for _ in range(rng.randint(1, 30))] for _ in range(12)]
    plain = engine("continuous", "paged").generate(prompts, max_tokens=24)
    eng = engine("continuous", "paged", enable_prefix_caching=True, num_kv_blocks=20, max_num_seqs=12)
    cached = eng.generate(prompts, max_tokens=24)
    assert [o.token_ids for o in cached] == [o.token_ids for o in plain]
    steps = eng.step_stats()
    assert sum(s.preemptions for s in steps) > 0
    # A re-admitted sequence finds its blocks again: that is a new hit, counted once in its step.
    assert sum(s.prefix_cache_hit_tokens for s in steps) == eng.kv.stats()["prefix_cache_hit_tokens"]


def test_static_batch_keeps_finished_members_as_padding():
    eng = engine("static", "paged", max_batch_size=4)
    prompts = [[5, 6, 7]] * 4
    # Different max_tokens: the batch runs until the longest (20) is done.
    seqs_max = [2, 5, 10, 20]
    reqs = []
    for i, (p, m) in enumerate(zip(prompts, seqs_max, strict=True)):
        reqs.append(Request(id=f"r{i}", max_tokens=m, prompt_token_ids=p))
    events = asyncio.run(_stream_all(eng, reqs))
    assert [len(toks) for toks in events] == seqs_max
    decode_steps = [s for s in eng.step_stats() if s.kind == "decode"]
    assert len(decode_steps) == 19
    # Padding rows are the finished members: 3 after step 1, 2... => sum of (20 - m) for m < 20.
    assert sum(s.padded_tokens for s in decode_steps) == sum(20 - m for m in seqs_max)


def test_static_batch_pads_prompts_to_the_longest_in_the_batch():
    eng = engine("static", "paged", max_batch_size=3)
    prompts = [[5] * 3, [6] * 10, [7] * 6]
    outs = eng.generate(prompts, max_tokens=2)
    first = eng.step_stats()[0]
    assert first.kind == "prefill" and first.num_seqs == 3
    assert first.num_prefill_tokens == 19 and first.padded_tokens == (10 - 3) + (10 - 6)
    # Padding changes the work, never the tokens.
    alone = [engine("sequential", "paged").generate([p], max_tokens=2)[0].token_ids for p in prompts]
    assert [o.token_ids for o in outs] == alone


def test_dynamic_batch_launches_after_max_wait_without_a_full_batch():
    eng = engine("dynamic", "paged", max_batch_size=8, max_wait_ms=30)
    reqs = [Request(id=f"d{i}", max_tokens=3, prompt_token_ids=[4, 5, 6]) for i in range(3)]
    events = asyncio.run(_stream_all(eng, reqs, finish=False))
    assert [len(toks) for toks in events] == [3, 3, 3]
    assert eng.step_stats()[0].num_seqs == 3


def test_static_batch_waits_for_a_full_batch_until_told_no_more_come():
    eng = engine("static", "paged", max_batch_size=8)
    eng.start()
    try:
        async def run():
            task = asyncio.create_task(_collect(eng, Request(id="s0", max_tokens=2, prompt_token_ids=[3, 4])))
            await asyncio.sleep(0.2)
            assert not task.done()  # a batch of one is not full
            eng.flush()
            return await asyncio.wait_for(task, 10)

        assert len(asyncio.run(run())) == 2
    finally:
        eng.stop()


def test_streaming_from_many_threads_while_the_loop_runs(expected):
    eng = engine("continuous", "paged")
    eng.start()
    results = {}
    try:
        def client(i):
            results[i] = eng.generate([PROMPTS[i]], max_tokens=MAX_TOKENS)[0].token_ids

        threads = [threading.Thread(target=client, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        eng.stop()
    assert [results[i] for i in range(12)] == expected[:12]


def test_stream_events_carry_increasing_times_and_a_final_reason():
    eng = engine("chunked", "paged")
    req = Request(id="x", max_tokens=6, prompt_token_ids=list(range(3, 40)), sampling=SamplingParams())
    (tokens,), (events,) = asyncio.run(_stream_all(eng, [req], keep_events=True))
    assert len(tokens) == 6
    times = [e.time_s for e in events]
    assert times == sorted(times)
    assert events[-1].finished and events[-1].finish_reason == "length"
    assert events[-1].num_prompt_tokens == 37 and events[-1].num_output_tokens == 6
    assert events[0].scheduled_s is not None and events[0].scheduled_s <= events[0].time_s


def test_requests_that_cannot_fit_fail_alone_with_a_reason():
    eng = engine("continuous", "paged", num_kv_blocks=4)  # 64 positions
    reqs = [
        Request(id="big", max_tokens=10, prompt_token_ids=list(range(3, 100))),
        Request(id="ok", max_tokens=4, prompt_token_ids=[5, 6, 7]),
    ]
    (big, ok), (big_ev, ok_ev) = asyncio.run(_stream_all(eng, reqs, keep_events=True))
    assert big == [] and big_ev[-1].finish_reason == "error" and "KV" in big_ev[-1].error
    assert len(ok) == 4 and ok_ev[-1].error is None


def test_seeded_sampling_is_reproducible_and_batch_independent():
    prompts = PROMPTS[:6]
    a = engine("continuous", "paged").generate(prompts, max_tokens=10, temperature=0.8, top_k=50, top_p=0.9, seed=7)
    b = engine("sequential", "contiguous").generate(prompts, max_tokens=10, temperature=0.8, top_k=50, top_p=0.9, seed=7)
    c = engine("continuous", "paged").generate(prompts, max_tokens=10, temperature=0.8, top_k=50, top_p=0.9, seed=8)
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    assert [o.token_ids for o in a] != [o.token_ids for o in c]


def test_unseeded_sampling_follows_the_engine_seed_whatever_ran_before():
    def run():
        eng = engine("continuous", "paged", seed=3)
        return [o.token_ids for o in eng.generate(PROMPTS[:4], max_tokens=8, temperature=1.0)]

    first = run()
    engine("sequential", "paged").generate(PROMPTS[:3], max_tokens=2)  # other sequences in between
    assert run() == first
    other = ReferenceEngine(model="tiny", batching="continuous", seed=4)
    assert [o.token_ids for o in other.generate(PROMPTS[:4], max_tokens=8, temperature=1.0)] != first


def test_a_stopped_engine_runs_only_what_comes_after_the_stop():
    eng = engine("continuous", "paged")
    events = []
    seq = eng._make_job(Request(id="early", max_tokens=4, prompt_token_ids=[5, 6, 7]), events.append)
    eng._submit(seq)  # waits in the inbox; no loop runs it
    eng.stop()
    assert events[-1].finished and events[-1].finish_reason == "abort"
    outs = eng.generate([[5, 6, 7]], max_tokens=4)
    assert len(outs[0].token_ids) == 4
    assert len(events) == 1  # the aborted request got no second end
    assert all(s.num_seqs == 1 for s in eng.step_stats())


def test_logits_beside_a_running_loop_leave_the_prefix_cache_alone():
    eng = engine("continuous", "paged", enable_prefix_caching=True)
    prompt = PROMPTS[0] + PROMPTS[6]
    full = eng.logits(prompt)
    assert eng.kv.stats()["prefix_cache_hit_tokens"] == 0
    eng.start()
    try:
        outs = []
        worker = threading.Thread(target=lambda: outs.extend(eng.generate(PROMPTS[:16], max_tokens=12)))
        worker.start()
        again = [eng.logits(prompt) for _ in range(3)]
        worker.join(60)
        again.append(eng.logits(prompt))  # PROMPTS[0]'s blocks are in the prefix cache by now
    finally:
        eng.stop()
    assert len(PROMPTS[0]) > 2 * 16
    for logits in again:
        assert (logits - full).abs().max() < 1e-4
    assert eng.kv.stats()["prefix_cache_hit_tokens"] == 0  # logits() neither hit nor registered blocks
    assert len(outs) == 16
    assert eng.kv.num_free_blocks == eng.kv.num_blocks


async def _collect(eng, req, events=None):
    tokens = []
    async for ev in eng.stream(req):
        tokens += ev.token_ids
        if events is not None:
            events.append(ev)
    return tokens


async def _stream_all(eng, reqs, finish=True, keep_events=False):
    eng.start()
    try:
        logs = [[] for _ in reqs]
        tasks = [asyncio.create_task(_collect(eng, r, logs[i] if keep_events else None)) for i, r in enumerate(reqs)]
        await asyncio.sleep(0)
        if finish:
            eng.flush()
        results = await asyncio.wait_for(asyncio.gather(*tasks), 60)
    finally:
        eng.stop()
    return (results, logs) if keep_events else results


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dying_step_loop_fails_requests_instead_of_hanging():
    eng = engine("continuous", "paged")

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory")

    eng.runner.run = broken
    reqs = [Request(id="a", max_tokens=4, prompt_token_ids=[5, 6, 7])]
    (tokens,), (events,) = asyncio.run(_stream_all(eng, reqs, keep_events=True))
    assert tokens == [] and events[-1].finish_reason == "error"
    assert "out of memory" in events[-1].error
    assert not eng.is_alive()
    with pytest.raises(ValueError, match="step loop died"):  # new work fails at once
        eng.generate([[5, 6]], max_tokens=2)
