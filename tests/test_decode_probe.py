"""The hand-built steps of engines.reference.decode_probe (what scripts/profile_decode.py times)
against the engine's own loop: same prompts, same greedy tokens."""

from __future__ import annotations

from engines.reference import ReferenceEngine
from engines.reference.decode_probe import prefill_batch, release, run_step


def test_a_probe_prefill_step_picks_the_tokens_generate_picks() -> None:
    engine = ReferenceEngine(model="tiny", max_num_seqs=4, max_model_len=96)
    steps = prefill_batch(engine, 3, 24)
    prompts = [list(s.seq.prompt_token_ids) for s in steps]
    first = run_step(engine, steps)
    again = run_step(engine, steps)  # a probe step can run again: same slots, same tokens
    release(engine, steps)
    expected = [out.token_ids[0] for out in engine.generate(prompts, max_tokens=1, ignore_eos=True)]
    assert first == expected
    assert again == expected
    assert len({tuple(p) for p in prompts}) == 3  # three different prompts, not one thrice
