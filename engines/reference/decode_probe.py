"""A decode step built by hand, to time and profile the model at a chosen batch and context.

`decode_batch` gives `batch` sequences `context` cached positions each (blocks
reserved in the engine's KV cache, contents left as they are: attention costs
the same whatever the keys say) and returns the step that decodes one token of
each; `prefill_batch` gives fresh sequences due their whole prompt. `run_step`
runs a step as the engine's loop would (forward, then greedy
sampling); it can run again and again, each time writing the same slots.
"""

from __future__ import annotations

import time

from engines.base import SamplingParams
from engines.reference.sampling import sample
from engines.reference.scheduler import ScheduledSeq
from engines.reference.sequence import Sequence


def _admitted(engine, name: str, i: int, batch: int, prompt: int, positions: int) -> Sequence:
    """Sequence `i` of a probe batch: `prompt` tokens, `positions` KV slots reserved."""
    seq = Sequence(
        request_id=f"{name}-{i}",
        prompt_token_ids=[3 + (i + j) % 64 for j in range(prompt)],
        max_tokens=1 << 20,
        sampling=SamplingParams(ignore_eos=True),
    )
    engine.kv.admit(seq, reuse_prefix=False)
    if not engine.kv.grow(seq, positions):
        raise ValueError(f"the KV cache has no room for {batch} x {positions} positions")
    return seq


def decode_batch(engine, batch: int, context: int) -> list[ScheduledSeq]:
    """`batch` sequences of `context` computed tokens, each due one decode token."""
    steps = []
    for i in range(batch):
        seq = _admitted(engine, "probe", i, batch, context, context + 1)
        seq.output_token_ids.append(5)
        seq.num_computed_tokens = context
        steps.append(ScheduledSeq(seq, 1, is_prefill=False))
    return steps


def prefill_batch(engine, batch: int, prompt: int) -> list[ScheduledSeq]:
    """`batch` fresh sequences of `prompt` tokens each, all due their whole prompt in one step
    (a prefill step of batch x prompt tokens, as the offline workload's first steps are)."""
    return [ScheduledSeq(_admitted(engine, "probe-prefill", i, batch, prompt, prompt), prompt, is_prefill=True)
            for i in range(batch)]


def release(engine, steps: list[ScheduledSeq]) -> None:
    for s in steps:
        engine.kv.free(s.seq)


def run_step(engine, steps: list[ScheduledSeq]) -> list[int]:
    logits, sampled = engine.runner.run(steps)
    real = [steps[i].seq for i in sampled]
    return sample(logits, [s.sampling for s in real], [None] * len(real))


def step_times_s(engine, steps: list[ScheduledSeq], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run_step(engine, steps)
        times.append(time.perf_counter() - start)
    return times


def op_table(engine, steps: list[ScheduledSeq], repeats: int = 3, row_limit: int = 25) -> str:
    """torch.profiler's table of one step's ops, averaged over `repeats` steps, by self CPU time."""
    from torch.profiler import ProfilerActivity, profile

    run_step(engine, steps)  # warm up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(repeats):
            run_step(engine, steps)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=row_limit)
