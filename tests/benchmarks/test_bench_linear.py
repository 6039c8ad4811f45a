"""Linear layers per precision: one decoder layer's matmuls at decode (1 row) and prefill sizes.

CPU: qwen2.5-0.5b's layer (qkv 896->1152, o 896->896, gate_up 896->9728,
down 4864->896); CUDA: llama-3.1-8b's. Each precision runs in its compute
dtype for the device, weights as `quantize_model` stores them. Timed with
`python -m pytest tests/benchmarks --benchmark-enable`; `weight_bytes` /
time is the bandwidth the matmuls reached.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from engines.reference.cpu_layout import optimize_cpu_layout
from engines.reference.precision import PRECISIONS, get_precision, quantize_model, weight_bytes
from engines.reference.presets import get_preset

ON_CUDA = torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_CUDA else "cpu")
PRESET = "llama-3.1-8b" if ON_CUDA else "qwen2.5-0.5b"
ROWS = {"decode": 1, "prefill": 256 if ON_CUDA else 64}


def layer_shapes(preset: str) -> list[tuple[int, int]]:
    """(in_features, out_features) of one decoder layer's matmuls, q/k/v and gate/up stacked."""
    cfg = get_preset(preset)
    h, i = cfg.hidden_size, cfg.intermediate_size
    return [(h, cfg.q_size + 2 * cfg.kv_size), (cfg.q_size, h), (h, 2 * i), (i, h)]


@pytest.fixture(scope="module", params=list(PRECISIONS))
def layer(request) -> tuple[str, nn.ModuleList]:
    name = request.param
    torch.manual_seed(0)
    dtype = get_precision(name).compute_dtype(DEVICE)
    with torch.device(DEVICE):
        linears = nn.ModuleList(nn.Linear(k, n, bias=False) for k, n in layer_shapes(PRESET))
    linears.to(dtype)
    quantize_model(linears, name)
    if not ON_CUDA:
        optimize_cpu_layout(linears)  # as the engine stores them on a CPU
    return name, linears


@pytest.mark.parametrize("phase", list(ROWS))
def test_linear_layer(benchmark, layer, phase):
    name, linears = layer
    dtype = get_precision(name).compute_dtype(DEVICE)
    inputs = {
        k: torch.randn(ROWS[phase], k, dtype=dtype, device=DEVICE) for k, _ in layer_shapes(PRESET)
    }

    def run():
        outs = [m(inputs[k]) for m, (k, _) in zip(linears, layer_shapes(PRESET), strict=True)]
        if ON_CUDA:
            torch.cuda.synchronize()
        return outs

    outs = benchmark(run)
    benchmark.extra_info.update(
        precision=name, dtype=str(dtype), rows=ROWS[phase], weight_bytes=weight_bytes(linears)
    )
    assert [o.shape[-1] for o in outs] == [n for _, n in layer_shapes(PRESET)]
    assert all(torch.isfinite(o).all() for o in outs)


def decode_stack(preset: str, name: str) -> tuple[list[nn.Module], torch.dtype]:
    """Every matmul of a decode step on `preset`: all layers', then the LM head (named so,
    since precisions may store the token table in its own format)."""
    cfg = get_preset(preset)
    dtype = get_precision(name).compute_dtype(DEVICE)
    gen = torch.Generator(device=DEVICE).manual_seed(0)

    def linear(k: int, n: int) -> nn.Linear:
        layer = nn.Linear(k, n, bias=False, device="meta")
        weight = torch.randn(n, k, generator=gen, device=DEVICE, dtype=dtype) * k**-0.5
        layer.weight = nn.Parameter(weight, requires_grad=False)
        return layer

    stack = nn.Module()
    stack.layers = nn.ModuleList(
        linear(k, n) for k, n in layer_shapes(preset) * cfg.num_hidden_layers
    )
    stack.lm_head = linear(cfg.hidden_size, cfg.vocab_size)
    quantize_model(stack, name)
    if not ON_CUDA:
        optimize_cpu_layout(stack)
    return [*stack.layers, stack.lm_head], dtype


@pytest.mark.slow
def test_int8_decode_matmuls_not_slower_than_bf16_on_the_0_5b_preset():
    """Batch-1 decode, every matmul of qwen2.5-0.5b (494M weights), precisions interleaved
    round by round. Compared on the fastest round: on a shared machine other processes
    only ever add time, and they stall multi-threaded bf16 kernels (thread barriers)
    far more than they stall others. Run with `-m slow -s` to see min and median."""
    import statistics
    import time

    stacks = {name: decode_stack("qwen2.5-0.5b", name) for name in ("fp32", "bf16", "int8", "fp8")}
    times: dict[str, list[float]] = {name: [] for name in stacks}
    for _ in range(9):
        for name, (linears, dtype) in stacks.items():
            inputs = {
                m.in_features: torch.randn(1, m.in_features, dtype=dtype, device=DEVICE)
                for m in linears
            }
            start = time.perf_counter()
            for m in linears:
                m(inputs[m.in_features])
            if ON_CUDA:
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
    min_s = {name: min(t[1:]) for name, t in times.items()}
    for name, t in times.items():
        print(
            f"{name}: min {min_s[name] * 1e3:.1f} ms, median {statistics.median(t[1:]) * 1e3:.1f} ms"
        )
    print(f"int8/bf16 = {min_s['int8'] / min_s['bf16']:.2f}")
    assert min_s["int8"] <= 1.10 * min_s["bf16"]
