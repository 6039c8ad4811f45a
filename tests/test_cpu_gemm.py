"""`engine.cpu_bf16_matmul=kernel`: llmperf's bf16 Linear kernel (engines/reference/kernels/cpu/
gemm_bf16.cpp, cpu_layout.PairedLinear) against oneDNN's packed inner product (PackedLinear) and an
fp32 reference, its batch invariance, and what it refuses."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from engines.reference import ReferenceEngine, cpu_layout
from engines.reference.cpu_layout import (
    PackedLinear,
    PairedLinear,
    bf16_pairs_missing,
    optimize_cpu_layout,
)
from llmperf.errors import ConfigError

MISSING = bf16_pairs_missing()
needs_kernel = pytest.mark.skipif(MISSING is not None, reason=f"no bf16 Linear kernel here: {MISSING}")
BF16_ULP = 2**-7  # bf16's spacing relative to a value (8 bits of mantissa)


def _pair(out_features: int, in_features: int, bias: bool, seed: int = 0):
    torch.manual_seed(seed)
    linear = nn.Linear(in_features, out_features, bias=bias).to(torch.bfloat16)
    with torch.no_grad():
        return linear, PairedLinear(linear), PackedLinear(linear)


@needs_kernel
@pytest.mark.parametrize("shape", [(960, 576), (576, 576), (3072, 576), (576, 1536), (896, 576), (100, 64), (4097, 130)],
                         ids=["qkv", "o", "gate_up", "down", "head", "one-panel-tail", "odd-out"])
@pytest.mark.parametrize("rows", [1, 7, 12, 64, 301])
@pytest.mark.parametrize("bias", [False, True])
def test_the_kernel_gives_onednns_outputs(shape, rows, bias):
    """The same fp32 sums over the inputs in order, rounded to bf16 alike: every output within one
    bf16 unit of oneDNN's, nearly all bitwise, and both within bf16 rounding of fp32 arithmetic."""
    linear, ours, onednn = _pair(*shape, bias)
    x = torch.randn(rows, shape[1]).to(torch.bfloat16)
    with torch.no_grad():
        got, want = ours(x), onednn(x)
        exact = torch.nn.functional.linear(x.float(), linear.weight.float(),
                                           None if linear.bias is None else linear.bias.float())
    assert got.dtype == torch.bfloat16 and got.shape == (rows, shape[0])
    torch.testing.assert_close(got.float(), want.float(), rtol=BF16_ULP, atol=1e-6)
    assert (got == want).float().mean().item() > 0.999
    torch.testing.assert_close(got.float(), exact, rtol=BF16_ULP, atol=1e-2)


@needs_kernel
def test_a_row_comes_out_the_same_in_any_batch():
    """Each row's sums run in the same order whatever the rows beside it (no split of the inputs,
    no tile-dependent order): a token's Linear outputs do not depend on the step it is in."""
    _, ours, _ = _pair(576, 1536, True)
    x = torch.randn(64, 1536).to(torch.bfloat16)
    with torch.no_grad():
        whole = ours(x)
        for start, stop in ((0, 1), (5, 18), (13, 64), (60, 61)):
            assert torch.equal(ours(x[start:stop]), whole[start:stop])
        assert torch.equal(ours(x.view(4, 16, 1536)), whole.view(4, 16, 576))  # leading dims are rows


@needs_kernel
def test_an_odd_input_width_keeps_onednn_and_a_tied_head_its_table():
    model = nn.Module()
    model.embed = nn.Embedding(96, 64).to(torch.bfloat16)
    model.head = nn.Linear(64, 96, bias=False).to(torch.bfloat16)
    model.head.weight = model.embed.weight
    model.odd = nn.Linear(63, 32).to(torch.bfloat16)
    table = model.embed.weight.detach().clone()
    optimize_cpu_layout(model, "kernel")
    assert isinstance(model.head, PairedLinear) and isinstance(model.odd, PackedLinear)
    assert torch.equal(model.embed.weight, table)  # the lookup keeps the plain table


@needs_kernel
def test_the_engine_runs_it_by_default_here_and_says_so():
    engine = ReferenceEngine(model="tiny", precision="bf16", max_num_seqs=2, max_model_len=64)
    assert engine.options["cpu_bf16_matmul"] == ("kernel" if cpu_layout.kernel_suits() else "native")
    assert any(isinstance(m, PairedLinear) for m in engine.model.modules()) == cpu_layout.kernel_suits()
    assert engine.info()["matmul_dtype"] == "bfloat16"


def test_asking_for_the_kernel_where_it_cannot_run_is_one_config_error(monkeypatch):
    monkeypatch.setattr(cpu_layout, "bf16_pairs_missing", lambda: "the C++ ops were built without AVX512_BF16")
    with pytest.raises(ConfigError, match=r"^cpu_bf16_matmul='kernel': the C\+\+ ops were built without AVX512_BF16$"):
        cpu_layout.resolve_bf16_matmul("kernel")
    assert cpu_layout.resolve_bf16_matmul("auto") in ("native", "fp32")  # auto falls back
