"""`engine.compile=true`: the compiled model generates the same greedy tokens as eager, and the
engine reports the time compiling took apart from the steps it measures."""

from __future__ import annotations

from engines.reference import ReferenceEngine

PROMPTS = [[3 + (i * 7 + j) % 200 for j in range(5 + 9 * i)] for i in range(3)]


def test_compiled_engine_generates_the_greedy_tokens_of_eager_and_reports_compile_time():
    kw = dict(model="tiny", precision="fp32", max_num_seqs=4, max_model_len=128)
    eager = ReferenceEngine(**kw)
    compiled = ReferenceEngine(**kw, compile=True)
    want = [o.token_ids for o in eager.generate(PROMPTS, max_tokens=10, ignore_eos=True)]
    got = [o.token_ids for o in compiled.generate(PROMPTS, max_tokens=10, ignore_eos=True)]
    assert got == want
    assert compiled.info()["compile_s"] > 0
    assert eager.info()["compile_s"] is None
    # The warm-up's steps are not the run's: only the generate() above is on record.
    assert sum(s.num_decode_tokens for s in compiled.step_stats()) == 3 * 9
