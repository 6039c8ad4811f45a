"""Triton attention kernels against a naive PyTorch reference.

On CPU the kernels run under Triton's interpreter (the acceptance tolerances:
1e-4 fp32, 2e-3 fp16); where CUDA is present the same tests run them compiled.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from engines.reference.attention.base import AttentionMetadata
from engines.reference.kernels import prepare_triton
from engines.reference.kernels.reference import (
    causal_attention,
    gather_sequence_kv,
    paged_attention_reference,
    random_paged_batch,
)

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture(scope="module")
def kernels() -> SimpleNamespace:
    """The kernel modules, imported once the interpreter is set up (CPU)."""
    prepare_triton(DEVICE)
    from engines.reference.attention.triton import TritonAttention
    from engines.reference.kernels import decode_attention, prefill_attention

    return SimpleNamespace(
        backend=TritonAttention(),
        decode=decode_attention.paged_decode_attention,
        choose_num_splits=decode_attention.choose_num_splits,
        prefill=prefill_attention.paged_prefill_attention,
        varlen=prefill_attention.varlen_attention,
    )


BLOCK_SIZE = 16
NUM_KV_HEADS = 2


def tolerance(dtype: torch.dtype, ref: torch.Tensor) -> float:
    """fp32 and fp16 as the acceptance states; bf16 within its rounding of the output.

    Compiled (CUDA), half-precision kernels also round the softmax probabilities to
    the input dtype for the tensor-core P.V product: twice the bound there.
    """
    if dtype == torch.float32:
        return 1e-4
    slack = 2.0 if DEVICE.type == "cuda" else 1.0
    if dtype == torch.float16:
        return 2e-3 * slack
    return (2.0**-8 * ref.abs().max().item() + 1e-4) * slack


def make_batch(
    query_lens: list[int],
    seq_lens: list[int],
    num_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    shuffled: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, AttentionMetadata]:
    """Unowned cache slots hold NaN: a kernel reading one would poison its output."""
    return random_paged_batch(
        query_lens,
        seq_lens,
        num_heads,
        NUM_KV_HEADS,
        head_dim,
        BLOCK_SIZE,
        dtype,
        device=DEVICE,
        shuffled=shuffled,
    )


SHAPES = [(g, d) for g in (1, 4) for d in (64, 128)]  # (GQA ratio, head_dim)
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("group,head_dim", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_paged_prefill_matches_reference_with_context(kernels, group, head_dim, dtype):
    # A whole prompt, a chunk after cached context, a short tail: none a multiple of 16,
    # and long enough for several query and key tiles of 64.
    q, k_cache, v_cache, meta = make_batch(
        [70, 9, 3], [70, 140, 35], NUM_KV_HEADS * group, head_dim, dtype
    )
    scale = head_dim**-0.5
    out = kernels.prefill(
        q, k_cache, v_cache, meta.cu_query_lens, meta.seq_lens_t, meta.block_tables,
        meta.max_query_len, scale,
    )  # fmt: skip
    ref = paged_attention_reference(q, k_cache, v_cache, meta, scale)
    assert out.dtype == dtype and out.shape == q.shape
    assert (out.float() - ref).abs().max().item() <= tolerance(dtype, ref)


@pytest.mark.parametrize("group,head_dim", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_paged_decode_matches_reference(kernels, group, head_dim, dtype):
    q, k_cache, v_cache, meta = make_batch(
        [1, 1, 1], [1, 45, 70], NUM_KV_HEADS * group, head_dim, dtype
    )
    scale = head_dim**-0.5
    out = kernels.decode(
        q, k_cache, v_cache, meta.seq_lens_t, meta.block_tables, meta.max_seq_len, scale
    )
    ref = paged_attention_reference(q, k_cache, v_cache, meta, scale)
    assert out.dtype == dtype
    assert (out.float() - ref).abs().max().item() <= tolerance(dtype, ref)


@pytest.mark.parametrize(
    "num_splits,dtype",
    [(1, torch.float32), (3, torch.float32), (8, torch.float32), (3, torch.bfloat16)],
)
def test_decode_split_kv_merge_is_exact_including_empty_splits(kernels, num_splits, dtype):
    # 8 splits of a 1-token sequence leave 7 splits empty; 150 tokens in 3 split unevenly.
    q, k_cache, v_cache, meta = make_batch([1, 1], [1, 150], 8, 64, dtype)
    out = kernels.decode(
        q, k_cache, v_cache, meta.seq_lens_t, meta.block_tables, meta.max_seq_len, 0.125,
        num_splits=num_splits,
    )  # fmt: skip
    ref = paged_attention_reference(q, k_cache, v_cache, meta, 0.125)
    assert out.dtype == dtype
    assert (out.float() - ref).abs().max().item() <= tolerance(dtype, ref)


@pytest.mark.parametrize("group", [1, 4])
def test_varlen_prefill_over_packed_kv_matches_reference(kernels, group):
    gen = torch.Generator().manual_seed(1)
    q_lens, kv_lens, head_dim = [19, 1, 33], [19, 7, 40], 64
    q = torch.randn(sum(q_lens), NUM_KV_HEADS * group, head_dim, generator=gen).to(DEVICE)
    k = torch.randn(sum(kv_lens), NUM_KV_HEADS, head_dim, generator=gen).to(DEVICE)
    v = torch.randn(sum(kv_lens), NUM_KV_HEADS, head_dim, generator=gen).to(DEVICE)
    cu_q = torch.tensor([0, 19, 20, 53], dtype=torch.int32, device=DEVICE)
    cu_kv = torch.tensor([0, 19, 26, 66], dtype=torch.int32, device=DEVICE)
    out = kernels.varlen(q, k, v, cu_q, cu_kv, max(q_lens), 0.125)
    for i in range(3):
        qs = slice(int(cu_q[i]), int(cu_q[i + 1]))
        ks = slice(int(cu_kv[i]), int(cu_kv[i + 1]))
        ref = causal_attention(q[qs], k[ks], v[ks], 0.125)
        assert (out[qs] - ref).abs().max().item() <= 1e-4


@pytest.mark.parametrize("shuffled", [True, False], ids=["paged", "contiguous"])
def test_triton_backend_dispatches_prefill_mixed_and_decode_batches(kernels, shuffled):
    backend = kernels.backend
    assert backend.name == "triton"
    for query_lens, seq_lens in [([12, 5], [12, 20]), ([1, 6, 1], [33, 6, 17]), ([1, 1], [17, 48])]:
        q, k_cache, v_cache, meta = make_batch(query_lens, seq_lens, 8, 64, torch.float32, shuffled)
        out = backend(q, k_cache, v_cache, meta, 0.125)
        ref = paged_attention_reference(q, k_cache, v_cache, meta, 0.125)
        assert (out - ref).abs().max().item() <= 1e-4


def test_group_of_seven_query_heads_per_kv_head_as_in_qwen2_5(kernels):
    # 14 query heads over 2 kv heads: the group is padded to 8 rows inside the kernels.
    q, k_cache, v_cache, meta = make_batch([1, 1], [30, 77], 14, 64, torch.float32)
    decode = kernels.decode(
        q, k_cache, v_cache, meta.seq_lens_t, meta.block_tables, meta.max_seq_len, 0.125
    )
    ref = paged_attention_reference(q, k_cache, v_cache, meta, 0.125)
    assert (decode - ref).abs().max().item() <= 1e-4
    q, k_cache, v_cache, meta = make_batch([20, 6], [20, 50], 14, 64, torch.float32)
    prefill = kernels.prefill(
        q, k_cache, v_cache, meta.cu_query_lens, meta.seq_lens_t, meta.block_tables,
        meta.max_query_len, 0.125,
    )  # fmt: skip
    ref = paged_attention_reference(q, k_cache, v_cache, meta, 0.125)
    assert (prefill - ref).abs().max().item() <= 1e-4


def test_reference_agrees_with_torch_sdpa():
    q, k_cache, v_cache, meta = make_batch([10], [10], 8, 64, torch.float32)
    k, v = gather_sequence_kv(k_cache, v_cache, meta.block_tables[0], 10)
    sdpa = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
        is_causal=True, scale=0.125, enable_gqa=True,
    ).transpose(0, 1)  # fmt: skip
    ref = paged_attention_reference(q, k_cache, v_cache, meta, 0.125)
    assert (sdpa - ref).abs().max().item() <= 1e-5


def test_num_splits_fill_two_waves_but_never_split_below_a_tile(kernels):
    choose_num_splits = kernels.choose_num_splits
    assert choose_num_splits(1, 8, 4096, 64, 132) == 33  # ceil(264 / 8)
    assert choose_num_splits(1, 8, 100, 64, 132) == 2  # only two tiles of keys
    assert choose_num_splits(64, 8, 4096, 64, 132) == 1  # 512 programs already
    assert choose_num_splits(1, 1, 1 << 20, 64, 132) == 64  # capped


def test_prepare_triton_refuses_an_explicit_opt_out_on_cpu(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        prepare_triton(torch.device("cpu"))


def test_kernels_run_interpreted_even_when_torch_imported_triton_first(tmp_path):
    # torch imports triton on its own (torch._dynamo probes for it), before TRITON_INTERPRET
    # is set; triton.language's helpers are then compiled ones. A fresh process shows it.
    script = tmp_path / "late_interpret.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, sys
            os.environ.pop("TRITON_INTERPRET", None)
            import torch, triton.language  # compiled helpers, as torch would leave them
            from engines.reference.kernels import prepare_triton
            from engines.reference.kernels.reference import paged_attention_reference, random_paged_batch
            prepare_triton(torch.device("cpu"))
            from engines.reference.attention.triton import TritonAttention
            q, k, v, meta = random_paged_batch([1, 5], [9, 20], 4, 2, 32, 16)
            err = (TritonAttention()(q, k, v, meta, 0.2) - paged_attention_reference(q, k, v, meta, 0.2)).abs().max()
            print(f"max_err={err.item():.2e}")
            sys.exit(0 if err <= 1e-4 else 1)
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "max_err=" in done.stdout
