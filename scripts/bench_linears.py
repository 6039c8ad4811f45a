"""A decoder layer's four bf16 Linears, oneDNN's packed inner product (cpu_bf16_matmul=native)
against llmperf's kernel (cpu_bf16_matmul=kernel, kernels/cpu/gemm_bf16.cpp), side by side.

    python scripts/bench_linears.py                  # 64 rows: a decode step of 64 sequences
    python scripts/bench_linears.py rows=2048        # a prefill step of 16 x 128 tokens

Shapes are llama-107m's (hidden 576, 9/3 heads of 64, intermediate 1536): qkv, o, gate_up and
down. Each Linear has `layers` (30) copies, as a step's layers, so the weights come from memory
as in a step; prints the median of `repeats` passes per Linear in µs and GFLOP/s, the layer's
total for each path and their ratio, and the share of outputs that are bitwise equal. Options
are `key=value`: rows, hidden, heads, kv_heads, head_dim, intermediate, threads, layers, repeats.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engines.reference.cpu_layout import PackedLinear, PairedLinear, bf16_pairs_missing  # noqa: E402


def main(argv: list[str]) -> int:
    args = {"rows": "64", "hidden": "576", "heads": "9", "kv_heads": "3", "head_dim": "64", "intermediate": "1536",
            "threads": "2", "layers": "30", "repeats": "15"}
    for arg in argv:
        key, _, value = arg.partition("=")
        if key not in args or not value.isdigit():
            print(f"bench_linears: bad option {arg!r}; valid (integers): {', '.join(args)}", file=sys.stderr)
            return 2
        args[key] = value
    why = bf16_pairs_missing()
    if why is not None:
        print(f"bench_linears: llmperf's bf16 Linear kernel does not run here: {why}", file=sys.stderr)
        return 2
    a = {k: int(v) for k, v in args.items()}
    torch.set_num_threads(a["threads"])
    hidden, inter = a["hidden"], a["intermediate"]
    shapes = {"qkv": (hidden, (a["heads"] + 2 * a["kv_heads"]) * a["head_dim"]), "o": (a["heads"] * a["head_dim"], hidden),
              "gate_up": (hidden, 2 * inter), "down": (inter, hidden)}
    torch.manual_seed(0)
    totals = {"oneDNN": 0.0, "kernel": 0.0}
    for name, (k, n) in shapes.items():
        linears = [nn.Linear(k, n, bias=False).to(torch.bfloat16) for _ in range(a["layers"])]
        x = torch.randn(a["rows"], k).to(torch.bfloat16)
        with torch.no_grad():
            paths = {"oneDNN": [PackedLinear(lin) for lin in linears], "kernel": [PairedLinear(lin) for lin in linears]}
            outs = {path: mods[0](x) for path, mods in paths.items()}
            line = [f"{name:8s}"]
            for path, mods in paths.items():
                times = []
                for _ in range(a["repeats"]):
                    start = time.perf_counter()
                    for mod in mods:
                        mod(x)
                    times.append((time.perf_counter() - start) / len(mods))
                t = statistics.median(times)
                totals[path] += t
                line.append(f"{path} {t * 1e6:8.1f} us {2 * a['rows'] * k * n / t / 1e9:5.0f} GFLOP/s")
        equal = (outs["oneDNN"] == outs["kernel"]).float().mean().item()
        print("  ".join(line) + f"  bitwise equal {equal:.4f}")
    print(f"{a['rows']} rows, a layer: oneDNN {totals['oneDNN'] * 1e6:.0f} us, kernel {totals['kernel'] * 1e6:.0f} us "
          f"({totals['oneDNN'] / totals['kernel']:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
