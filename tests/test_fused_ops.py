"""`engine.fused_ops=true`: the C++ RMSNorm, residual-add + RMSNorm, RoPE and SiLU-and-mul
against the torch code they replace (bitwise in bf16 but for the norm's fp32 sum order), and a
model running them (with attention=cpu's decode kernel) against transformers' LlamaForCausalLM."""

from __future__ import annotations

import pytest
import torch
from hf_checkpoints import make_hf_llama

from engines.reference import ReferenceEngine
from engines.reference.fused_ops import CpuRMSNorm
from engines.reference.kernels.cpu_ops import cpu_ops
from engines.reference.model import RMSNorm, apply_rotary, silu_and_mul
from engines.reference.options import ReferenceEngineConfig
from llmperf.errors import ConfigError

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(scope="module")
def ops():
    return cpu_ops()[0]


def rows(n, width, dtype, seed):
    return (torch.randn(n, width, generator=torch.Generator().manual_seed(seed)) * 3).to(dtype)


def assert_matches(got, want):
    """fp32: to rounding; bf16/fp16: at most one unit in the last place, and nearly all equal."""
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.dtype == torch.float32:
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        return
    ulp = torch.finfo(want.dtype).eps * want.float().abs().clamp(min=torch.finfo(want.dtype).tiny)
    assert ((got.float() - want.float()).abs() <= ulp * 1.01).all()
    assert (got == want).float().mean().item() > 0.98


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("num_rows", [1, 3, 70])
def test_rms_norm_and_its_residual_add_match_the_torch_module(ops, dtype, num_rows):
    norm = RMSNorm(576, 1e-5)
    norm.weight.data = (1 + 0.1 * rows(1, 576, torch.float32, 9)[0]).to(dtype)
    fused = CpuRMSNorm(norm, ops)
    x, residual = rows(num_rows, 576, dtype, 1), rows(num_rows, 576, dtype, 2)
    assert_matches(fused(x), norm(x))
    got_normed, got_sum = fused.add_forward(x, residual)
    want_normed, want_sum = norm.add_forward(x, residual)
    assert torch.equal(got_sum, want_sum)
    assert_matches(got_normed, want_normed)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_silu_mul_matches_torch_on_a_strided_view(ops, dtype):
    wide = rows(5, 2 * 1536 + 64, dtype, 3)
    gate_up = wide[:, : 2 * 1536]  # rows a view apart, as a slice of a larger buffer
    assert_matches(ops.silu_mul(gate_up), silu_and_mul(gate_up))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("head_dim", [64, 32])
def test_rotary_matches_apply_rotary_on_the_qkv_split(ops, dtype, head_dim):
    tokens, heads, kv_heads = 7, 9, 3
    qkv = rows(tokens, (heads + 2 * kv_heads) * head_dim, dtype, 4)
    q, k, _ = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    q, k = q.reshape(tokens, heads, head_dim), k.reshape(tokens, kv_heads, head_dim)  # strided views
    angles = torch.rand(tokens, 1, head_dim // 2, generator=torch.Generator().manual_seed(5)) * 50
    cos, sin = torch.cat([angles.cos()] * 2, -1).to(dtype), torch.cat([angles.sin()] * 2, -1).to(dtype)
    want_q, want_k = apply_rotary(q, k, cos, sin)
    assert_matches(ops.rotary(q, cos, sin), want_q)
    assert_matches(ops.rotary(k, cos, sin), want_k)


def test_the_engine_swaps_in_the_ops_and_generates_the_same_greedy_tokens():
    prompts = [[3 + (i * 11 + j) % 300 for j in range(4 + 19 * i)] for i in range(4)]
    kw = dict(model="tiny", precision="fp32", max_num_seqs=4, max_model_len=160)
    unfused = ReferenceEngine(**kw, fused_ops=False, attention="cpu")
    want = [o.token_ids for o in unfused.generate(prompts, max_tokens=20, ignore_eos=True)]
    eng = ReferenceEngine(**kw, fused_ops=True, attention="cpu")
    assert isinstance(eng.model.model.norm, CpuRMSNorm)
    assert not any(type(m) is RMSNorm for m in eng.model.modules())
    got = [o.token_ids for o in eng.generate(prompts, max_tokens=20, ignore_eos=True)]
    assert got == want


@pytest.mark.parametrize("shape", [
    dict(num_attention_heads=8, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True, rope_theta=5e5),
    dict(num_attention_heads=4, num_key_value_heads=2, attention_bias=True, hidden_size=256),
], ids=["gqa4-tied-d16", "qkv-bias-d64"])
def test_fused_ops_and_the_cpu_kernel_match_transformers(tmp_path, shape):
    hf = make_hf_llama(tmp_path, num_hidden_layers=3, **shape)
    eng = ReferenceEngine(model=str(tmp_path), precision="fp32", num_kv_blocks=64, fused_ops=True, attention="cpu")
    ids = torch.randint(3, hf.config.vocab_size, (33,), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = hf(ids[None]).logits[0].float()
    assert (eng.logits(ids.tolist()) - expected).abs().max().item() < 1e-4
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 320, (n,), generator=gen).tolist() for n in (3, 26, 50)]
    outs = eng.generate(prompts, max_tokens=24, temperature=0.0)
    for prompt, out in zip(prompts, outs, strict=True):
        with torch.no_grad():
            ref = hf.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=0)
        assert out.token_ids == ref[0, len(prompt):].tolist()
    assert eng.backend.kernel_rows > 0


@pytest.mark.parametrize("bad,problem", [
    (dict(device="cuda"), "runs on CPU only, not device=cuda"),
    (dict(compile=True), "does not combine with compile=true"),
])
def test_fused_ops_where_they_cannot_run_is_one_config_error(bad, problem):
    with pytest.raises(ConfigError, match=problem):
        ReferenceEngineConfig(fused_ops=True, **bad)


def test_tensor_parallel_ranks_run_the_ops_too():
    prompts = [[3 + (i * 7 + j) % 200 for j in range(5 + 9 * i)] for i in range(3)]
    kw = dict(model="tiny", max_num_seqs=4, max_model_len=128)
    want = [o.token_ids for o in ReferenceEngine(**kw, attention="sdpa", fused_ops=False).generate(
        prompts, max_tokens=10, ignore_eos=True)]
    with ReferenceEngine(**kw, tp=2, fused_ops=True, attention="cpu") as eng:
        got = [o.token_ids for o in eng.generate(prompts, max_tokens=10, ignore_eos=True)]
    assert got == want
