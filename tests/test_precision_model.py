"""Precisions and the Triton backend on the whole model: same tokens, close logits, fewer bytes."""

from __future__ import annotations

import random

import pytest
import torch

from engines.reference import ReferenceEngine
from engines.reference.scheduler import SCHEDULERS


def prompts(n, seed=0, max_len=12):
    rng = random.Random(seed)
    return [[rng.randrange(3, 512) for _ in range(rng.randint(2, max_len))] for _ in range(n)]


@pytest.mark.parametrize("batching", list(SCHEDULERS))
def test_triton_attention_generates_what_sdpa_generates(batching):
    # The Triton interpreter is slow on CPU: a few short prompts, a few tokens.
    ps = prompts(3)
    opts = dict(model="tiny", batching=batching, kv_cache="paged", max_batch_size=3, max_num_batched_tokens=8, max_model_len=64)
    sdpa = ReferenceEngine(attention="sdpa", **opts).generate(ps, max_tokens=4)
    triton = ReferenceEngine(attention="triton", **opts).generate(ps, max_tokens=4)
    assert [o.token_ids for o in triton] == [o.token_ids for o in sdpa]


def test_triton_attention_with_the_contiguous_cache():
    ps = prompts(2, seed=1)
    opts = dict(model="tiny", batching="continuous", kv_cache="contiguous", max_model_len=32, max_num_seqs=2)
    sdpa = ReferenceEngine(attention="sdpa", **opts).generate(ps, max_tokens=4)
    triton = ReferenceEngine(attention="triton", **opts).generate(ps, max_tokens=4)
    assert [o.token_ids for o in triton] == [o.token_ids for o in sdpa]


@pytest.mark.slow
@pytest.mark.parametrize("kv_cache", ["contiguous", "paged"])
@pytest.mark.parametrize("batching", list(SCHEDULERS))
def test_triton_equals_sdpa_on_longer_generations(batching, kv_cache):
    ps = prompts(6, seed=2, max_len=40)
    opts = dict(model="tiny", batching=batching, kv_cache=kv_cache, max_batch_size=4, max_num_seqs=4, max_num_batched_tokens=32, max_model_len=128)
    sdpa = ReferenceEngine(attention="sdpa", **opts).generate(ps, max_tokens=12)
    triton = ReferenceEngine(attention="triton", **opts).generate(ps, max_tokens=12)
    assert [o.token_ids for o in triton] == [o.token_ids for o in sdpa]


@pytest.fixture(scope="module")
def fp32_reference():
    tokens = [list(range(3, 259)), [random.Random(s).randrange(3, 512) for s in range(256)]]
    eng = ReferenceEngine(model="tiny", precision="fp32")
    return tokens, [eng.logits(t) for t in tokens]


@pytest.mark.parametrize(("precision", "max_mean_abs"), [("bf16", 0.05), ("fp16", 0.01), ("int8", 0.1), ("fp8", 0.1)])
def test_lower_precisions_stay_close_to_fp32(fp32_reference, precision, max_mean_abs):
    tokens, reference = fp32_reference
    eng = ReferenceEngine(model="tiny", precision=precision)
    errors, agree, total = [], 0, 0
    for ids, ref in zip(tokens, reference, strict=True):
        got = eng.logits(ids).float()
        errors.append((got - ref).abs().mean().item())
        agree += (got.argmax(-1) == ref.argmax(-1)).sum().item()
        total += len(ids)
    assert total == 512
    assert max(errors) < max_mean_abs
    assert agree / total >= 0.95


def test_int8_weights_are_at_most_55_percent_of_bf16_on_a_real_model():
    bf16 = ReferenceEngine(model="tiny", precision="bf16").weight_bytes
    int8 = ReferenceEngine(model="tiny", precision="int8").weight_bytes
    assert int8 <= 0.55 * bf16
    assert ReferenceEngine(model="tiny", precision="fp32").weight_bytes == 2 * bf16


def test_quantized_engine_reports_its_compute_dtype_and_runs_every_strategy():
    eng = ReferenceEngine(model="tiny", precision="int8", batching="chunked", max_num_batched_tokens=16)
    outs = eng.generate(prompts(4, seed=3, max_len=30), max_tokens=6)
    assert all(len(o.token_ids) == 6 for o in outs)
    assert eng.info()["compute_dtype"] in ("bfloat16", "float32")
    assert torch.isfinite(eng.logits([5, 6, 7])).all()
