"""Quantized layers against float references, with error bounds from the quantization step."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from engines.reference.kernels import prepare_triton
from engines.reference.quant import (
    QuantizedEmbedding,
    get_weight_format,
    quantize_modules,
)
from engines.reference.quant.fp8 import FP8_MAX, Fp8Linear, e4m3_bits_to_fp16
from engines.reference.quant.int8 import Int8Linear

# The Triton int8 kernel: compiled where CUDA is present, interpreted on CPU.
KERNEL_DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def make_linear(in_features: int, out_features: int, bias: bool = True, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(in_features, out_features, bias=bias)


def int8_bound(x: torch.Tensor, layer: Int8Linear) -> torch.Tensor:
    """|y - y_ref| <= sum_k |x_k| * scale_n / 2: each code is off by at most half a step."""
    return x.abs().sum(-1, keepdim=True).float() * layer.scale.float() / 2


def fp8_bound(x: torch.Tensor, weight: torch.Tensor, layer: Fp8Linear) -> torch.Tensor:
    """e4m3 keeps 3 mantissa bits: relative error <= 2^-4 for normals, and an absolute
    error <= half the subnormal step (2^-10 in code units) near zero."""
    per_weight = weight.abs() * 2.0**-4 + layer.scale.float()[:, None] * 2.0**-10
    return x.abs().float() @ per_weight.T


def bf16_slack(product: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    """bf16 rounding of the matmul output and of the bias add, 2^-8 relative each, doubled:
    torch's fused int8 kernel rounds to bf16 inside as well (measured: up to 2^-8.1)."""
    return 2.0**-7 * (product.abs() + result.abs()) + 1e-6


def test_int8_codes_and_scales_by_hand():
    weight = torch.tensor([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0], [0.127, 0.0, -0.0635]])
    layer = Int8Linear.from_weight(weight)
    assert layer.weight_q.dtype == torch.int8
    torch.testing.assert_close(layer.scale, torch.tensor([2 / 127, 1.0, 0.001]))
    # 1 / (2/127) = 63.5 rounds to even; the all-zero row codes to zeros, not NaN.
    assert layer.weight_q.tolist() == [[64, -127, 32], [0, 0, 0], [127, 0, -64]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_int8_linear_within_half_a_step_of_float(dtype):
    ref = make_linear(128, 96)
    layer = Int8Linear.from_weight(ref.weight, ref.bias)
    x = torch.randn(5, 128)
    y = layer.to(dtype)(x.to(dtype)).float()
    expected = ref(x.to(dtype).float()).detach()
    product = x.to(dtype).float() @ (layer.weight_q.float() * layer.scale.float()[:, None]).T
    exact = product + layer.bias.float()
    slack = bf16_slack(product, exact) if dtype == torch.bfloat16 else 1e-5
    assert ((y - expected).abs() <= int8_bound(x.to(dtype), layer) + slack).all()
    assert (y - expected).abs().max() > 0  # it did quantize
    # And the product itself is codes x scales, up to float rounding.
    assert ((y - exact).abs() <= slack).all()


def test_int8_bf16_width_not_multiple_of_16_avoids_the_fused_op():
    # torch._weight_int8pack_mm returns NaN (or crashes) for bf16 with in_features % 16 != 0.
    ref = make_linear(40, 24, bias=False)
    layer = Int8Linear.from_weight(ref.weight).to(torch.bfloat16)
    x = torch.randn(3, 40)
    y = layer(x.bfloat16()).float()
    product = x.bfloat16().float() @ (layer.weight_q.float() * layer.scale.float()[:, None]).T
    assert torch.isfinite(y).all()
    assert ((y - product).abs() <= bf16_slack(product, product)).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_triton_int8_weight_matmul_matches_dequantized_product(dtype):
    prepare_triton(KERNEL_DEVICE)
    from engines.reference.kernels.int8_matmul import int8_weight_matmul

    gen = torch.Generator().manual_seed(3)
    x = torch.randn(19, 70, generator=gen).to(dtype)  # K and N not multiples of the tiles
    codes = torch.randint(-127, 128, (45, 70), generator=gen, dtype=torch.int8)
    scale = (torch.rand(45, generator=gen) * 0.01).to(dtype)
    y = int8_weight_matmul(x.to(KERNEL_DEVICE), codes.to(KERNEL_DEVICE), scale.to(KERNEL_DEVICE))
    y = y.cpu()
    expected = (x.float() @ codes.float().T) * scale.float()
    assert y.dtype == dtype
    rel = {torch.float32: 1e-6, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}[dtype]
    assert ((y.float() - expected).abs() <= rel * expected.abs() + 1e-5).all()


def test_e4m3_bit_trick_is_exact_on_every_finite_code():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    exact = codes.view(torch.float8_e4m3fn).float()
    finite = ~exact.isnan()
    assert finite.sum() == 254  # 0x7F and 0xFF are NaN in e4m3fn
    assert torch.equal(e4m3_bits_to_fp16(codes).float()[finite] * 256, exact[finite])


def test_fp8_codes_saturate_at_448_per_row():
    weight = torch.tensor([[896.0, -448.0, 1.0], [0.5, 0.25, -0.125]])
    layer = Fp8Linear.from_weight(weight)
    codes = layer.weight_q.view(torch.float8_e4m3fn).float()
    torch.testing.assert_close(layer.scale, torch.tensor([2.0, 0.5 / FP8_MAX]))
    assert codes[:, 0].tolist() == [448.0, 448.0]
    assert codes[0, 1].item() == -224.0 and codes[0, 2].item() == 0.5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_fp8_linear_within_e4m3_rounding_of_float(dtype):
    ref = make_linear(128, 96, seed=1)
    layer = Fp8Linear.from_weight(ref.weight, ref.bias)
    x = torch.randn(4, 128)
    y = layer.to(dtype)(x.to(dtype)).float()
    expected = ref(x.to(dtype).float()).detach()
    codes = layer.weight_q.view(torch.float8_e4m3fn).float()
    product = x.to(dtype).float() @ (codes * layer.scale.float()[:, None]).T
    exact = product + layer.bias.float()
    slack = bf16_slack(product, exact) if dtype == torch.bfloat16 else 1e-5
    bound = fp8_bound(x.to(dtype), ref.weight.detach(), layer) + slack
    assert ((y - expected).abs() <= bound).all()
    assert ((y - exact).abs() <= slack).all()


@pytest.mark.parametrize("fmt", ["int8", "fp8"])
def test_column_major_float_weights_quantize_to_the_same_row_major_codes(fmt):
    # The model stores CPU weights transposed in memory (strides (1, out)) for faster GEMV.
    weight = make_linear(64, 48).weight.detach()
    column_major = weight.t().contiguous().t()
    cls = get_weight_format(fmt)
    a, b = cls.from_weight(weight), cls.from_weight(column_major)
    assert b.weight_q.is_contiguous() and torch.equal(a.weight_q, b.weight_q)
    x = torch.randn(3, 64).bfloat16()
    torch.testing.assert_close(a.to(torch.bfloat16)(x), b.to(torch.bfloat16)(x), rtol=0, atol=0)


def test_model_to_dtype_casts_scales_but_never_codes():
    for cls in (Int8Linear, Fp8Linear):
        layer = cls.from_weight(make_linear(32, 16).weight)
        codes = layer.weight_q.clone()
        layer.to(torch.bfloat16)
        assert torch.equal(layer.weight_q, codes) and layer.scale.dtype == torch.bfloat16


class TiedLM(nn.Module):
    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.embed_tokens.weight


@pytest.mark.parametrize("fmt", ["int8", "fp8"])
def test_tied_embedding_and_lm_head_share_one_quantized_table(fmt):
    torch.manual_seed(0)
    model = TiedLM(vocab=50, hidden=32)
    table = model.embed_tokens.weight.detach().clone()
    quantize_modules(model, get_weight_format(fmt))
    assert isinstance(model.embed_tokens, QuantizedEmbedding)
    assert model.embed_tokens.table is model.lm_head
    assert isinstance(model.proj, get_weight_format(fmt))
    ids = torch.tensor([[3, 49, 0], [7, 7, 12]])
    rows = model.embed_tokens(ids)
    step = model.lm_head.scale[ids].unsqueeze(-1)
    # int8: half a step per element; fp8: 2^-4 relative or half a subnormal step.
    bound = step / 2 if fmt == "int8" else table[ids].abs() * 2.0**-4 + step * 2.0**-10
    assert rows.shape == (2, 3, 32) and ((rows - table[ids]).abs() <= bound + 1e-7).all()
    # The head multiplies by the same rows the embedding returns.
    h = torch.randn(4, 32)
    torch.testing.assert_close(model.lm_head(h), h @ model.embed_tokens(torch.arange(50)).T)


def test_token_tables_take_their_own_format_tied_or_not():
    model = TiedLM(vocab=50, hidden=32)
    model.lm_head = nn.Linear(32, 50, bias=False)  # untied: found by its name
    quantize_modules(model, Fp8Linear, table_cls=Int8Linear)
    assert type(model.proj) is Fp8Linear
    assert type(model.lm_head) is Int8Linear and type(model.embed_tokens.table) is Int8Linear
    assert model.embed_tokens.table is not model.lm_head


def test_quantize_modules_refuses_a_tied_head_with_its_own_bias():
    model = TiedLM(vocab=50, hidden=32)
    model.lm_head.bias = nn.Parameter(torch.zeros(50))
    with pytest.raises(ValueError, match="own bias"):
        quantize_modules(model, Int8Linear)


def test_unknown_weight_format_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown weight format 'int3'; valid: int8, fp8"):
        get_weight_format("int3")


def test_fp8_scaled_mm_path_quantizes_activations_per_row_within_bounds():
    # The GPU path (sm_89+); torch runs the same call on CPU, which pins its arguments and math.
    ref = make_linear(64, 48, bias=False, seed=2)
    layer = Fp8Linear.from_weight(ref.weight)
    x = torch.randn(5, 64).bfloat16().float()
    y = layer._scaled_matmul(x.bfloat16()).float()
    expected = ref(x).detach()
    w = ref.weight.detach()
    x_step = x.abs().amax(dim=1, keepdim=True) / FP8_MAX
    x_err = x.abs() * 2.0**-4 + x_step * 2.0**-10
    w_err = w.abs() * 2.0**-4 + layer.scale.float()[:, None] * 2.0**-10
    bound = (x.abs() + x_err) @ w_err.T + x_err @ w.abs().T + 2.0**-8 * expected.abs()
    assert ((y - expected).abs() <= bound).all()
