"""bf16 Linears on CPUs without bf16 arithmetic (engines.reference.cpu_layout.WidenedLinear), and
`cpu_bf16_matmul`'s choice among the paths (llmperf's own kernel: tests/test_cpu_gemm.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from engines.reference import ReferenceEngine, cpu_info, cpu_layout
from engines.reference.cpu_layout import (
    WIDEN_MIN_ROWS,
    PairedLinear,
    WidenedLinear,
    bf16_pairs_missing,
    optimize_cpu_layout,
)
from engines.reference.options import ReferenceEngineConfig
from llmperf.errors import ConfigError

KERNEL = bf16_pairs_missing() is None  # llmperf's bf16 Linear kernel runs here (AVX512_BF16)


def _linear(bias: bool) -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(64, 48, bias=bias).to(torch.bfloat16)


@pytest.mark.parametrize("chunk", [1 << 22, 64 * 7])  # one chunk; 7 output features a chunk
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rows", [1, WIDEN_MIN_ROWS - 1, WIDEN_MIN_ROWS, 17])
def test_widened_linear_is_fp32_arithmetic_on_the_bf16_weight(monkeypatch, rows, bias, chunk):
    monkeypatch.setattr(cpu_layout, "WIDEN_CHUNK_ELEMENTS", chunk)
    linear = _linear(bias)
    x = torch.randn(2, rows, 64).to(torch.bfloat16)  # leading dims are rows too
    with torch.no_grad():
        out = WidenedLinear(linear)(x)
        assert out.dtype == torch.bfloat16 and out.shape == (2, rows, 48)
        if 2 * rows >= WIDEN_MIN_ROWS:
            b = None if linear.bias is None else linear.bias.float()
            exact = F.linear(x.float(), linear.weight.float(), b)
            # fp32 sums in another order may round to the neighbouring bf16: one ulp at most
            torch.testing.assert_close(out.float(), exact, rtol=2**-7, atol=1e-3)
            assert (out.float() - exact).abs().max() < (F.linear(x, linear.weight, linear.bias).float()
                                                        - exact).abs().max() + 1e-6
        else:
            assert torch.equal(out, F.linear(x, linear.weight, linear.bias))


def test_the_scratch_buffer_serves_inside_and_outside_inference_mode():
    widened = WidenedLinear(_linear(False))
    x = torch.randn(WIDEN_MIN_ROWS, 64).to(torch.bfloat16)
    cpu_layout._SCRATCH.buf = None  # made afresh inside inference mode, then used outside it
    with torch.inference_mode():
        inside = widened(x)
    with torch.no_grad():
        outside = widened(x)
    assert torch.equal(inside, outside)


def test_widened_linear_keeps_the_bf16_bytes():
    linear = _linear(False)
    widened = WidenedLinear(linear)
    assert widened.weight.dtype == torch.bfloat16
    assert torch.equal(widened.weight, linear.weight)
    assert widened.weight.stride() == (1, 48)  # [48, 64] column-major, the faster layout for few rows


def test_a_tied_table_stays_shared_with_the_widened_head():
    model = nn.Module()
    model.embed = nn.Embedding(48, 64).to(torch.bfloat16)
    model.head = nn.Linear(64, 48, bias=False).to(torch.bfloat16)
    model.head.weight = model.embed.weight
    optimize_cpu_layout(model, "fp32")
    assert isinstance(model.head, WidenedLinear)
    assert model.embed.weight is model.head.weight


@pytest.mark.parametrize("cpuinfo, native, auto", [
    ("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 avx512_vnni\n", True, "kernel"),
    ("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 amx_tile\n", True, "native"),
    ("processor\t: 0\nflags\t\t: fpu avx512f avx512_vnni avx512bw\n", False, "fp32"),
    ("processor\t: 0\nFeatures\t: fp asimd bf16\n", True, "native"),  # no x86 flags line: left native
])
def test_auto_widens_only_on_a_cpu_known_to_lack_bf16(monkeypatch, cpuinfo, native, auto):
    """auto: llmperf's kernel on AVX512_BF16 (oneDNN's AMX tiles where there are some), fp32
    where the CPU has no bf16 arithmetic, native otherwise; never the kernel under compile."""
    monkeypatch.setattr(cpu_info.Path, "read_text", lambda self, *a, **k: cpuinfo)
    monkeypatch.setattr(cpu_layout, "bf16_pairs_missing", lambda: None)  # as if the ops built for it
    cpu_layout.has_bf16_arithmetic.cache_clear()
    try:
        assert cpu_layout.has_bf16_arithmetic() is native
        assert cpu_layout.resolve_bf16_matmul("auto") == auto
        assert cpu_layout.resolve_bf16_matmul("auto", compile=True) == ("native" if native else "fp32")
        assert cpu_layout.resolve_bf16_matmul("native") == "native"
        assert cpu_layout.resolve_bf16_matmul("fp32") == "fp32"
    finally:
        cpu_layout.has_bf16_arithmetic.cache_clear()


def test_both_paths_pick_the_same_greedy_tokens_and_info_says_which_ran():
    prompts = [[3, 4, 5, 6, 7, 8, 9, 10] * 4, [11, 12, 13] * 5, [20, 21] * 9]
    tokens = {}
    for choice in ("native", "fp32", "kernel") if KERNEL else ("native", "fp32"):
        # sdpa, unfused: on the C++ decode kernel with the fused ops the first prompt's second
        # token is a tie in bf16 (logits of 497 and 36 equal under fp32 matmuls, 0.0625 apart
        # under native ones), which either path may break; this test is about the matmuls
        engine = ReferenceEngine(model="tiny", precision="bf16", cpu_bf16_matmul=choice,
                                 max_num_seqs=4, max_model_len=96, attention="sdpa",
                                 fused_ops=False)
        assert engine.options["cpu_bf16_matmul"] == choice
        info = engine.info()
        assert info["compute_dtype"] == "bfloat16"  # activations and KV cache stay bf16
        assert info["matmul_dtype"] == ("float32" if choice == "fp32" else "bfloat16")
        widened = sum(isinstance(m, WidenedLinear) for m in engine.model.modules())
        assert (widened > 0) == (choice == "fp32")
        assert any(isinstance(m, PairedLinear) for m in engine.model.modules()) == (choice == "kernel")
        outs = engine.generate(prompts, max_tokens=12, ignore_eos=True)
        tokens[choice] = [o.token_ids for o in outs]
    assert tokens["native"] == tokens["fp32"] == tokens.get("kernel", tokens["native"])


def test_a_compiled_model_is_not_widened_and_says_so():
    # torch.compile skips the CPU layouts (inductor cannot trace them): bf16 arithmetic stays.
    engine = ReferenceEngine(model="tiny", precision="bf16", cpu_bf16_matmul="fp32", compile=True,
                             max_num_seqs=2, max_model_len=64)
    assert not any(isinstance(m, WidenedLinear) for m in engine.model.modules())
    assert engine.info()["matmul_dtype"] == "bfloat16"


def test_an_unknown_choice_names_the_valid_ones():
    with pytest.raises(ConfigError, match=r"^cpu_bf16_matmul='?fp64'?: unknown CPU bf16 matmul"):
        ReferenceEngineConfig(cpu_bf16_matmul="fp64")
