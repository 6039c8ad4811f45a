"""The decode kernel (`torch.ops.llmperf.paged_decode`, attention=cpu) alone, timed per layer.

    python scripts/bench_paged_decode.py                       # 64 sequences of 160, random blocks
    python scripts/bench_paged_decode.py placement=sequential  # each sequence's blocks side by side
    python scripts/bench_paged_decode.py hot=1                 # one layer's caches for every layer (in cache)

A step's worth of layers (`layers`, 30), each with its own K and V caches in huge pages as the
engine's (engines/reference/huge_pages.py), so that each layer's cache comes from memory as in
a decode step; prints the median of `repeats` passes over the layers, in µs a layer, and the
cache bytes read a second. Options are `key=value`: seqs, context, heads, kv_heads, head_dim,
block, dtype (bfloat16, float16, float32), threads, placement (random, sequential), hot, layers,
repeats.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engines.reference.huge_pages import advise_huge, tensor_range  # noqa: E402
from engines.reference.kernels.cpu_ops import cpu_ops  # noqa: E402


def main(argv: list[str]) -> int:
    args = {"seqs": "64", "context": "160", "heads": "9", "kv_heads": "3", "head_dim": "64", "block": "16",
            "dtype": "bfloat16", "threads": "2", "placement": "random", "hot": "0", "layers": "30", "repeats": "7"}
    for arg in argv:
        key, _, value = arg.partition("=")
        if key not in args or not value:
            print(f"bench_paged_decode: unknown option {arg!r}; valid: {', '.join(args)}", file=sys.stderr)
            return 2
        args[key] = value
    seqs, context, block = int(args["seqs"]), int(args["context"]), int(args["block"])
    heads, kv_heads, head_dim = int(args["heads"]), int(args["kv_heads"]), int(args["head_dim"])
    dtype = getattr(torch, args["dtype"])
    torch.set_num_threads(int(args["threads"]))
    ops, _ = cpu_ops()
    per_seq = -(-context // block)
    num_blocks = seqs * per_seq
    gen = torch.Generator().manual_seed(0)
    order = torch.randperm(num_blocks, generator=gen) if args["placement"] == "random" else torch.arange(num_blocks)
    tables = order.view(seqs, per_seq).to(torch.int32)
    lens = torch.full((seqs,), context, dtype=torch.int32)
    q = torch.randn(seqs, heads, head_dim, generator=gen).to(dtype)

    def cache() -> torch.Tensor:
        t = torch.empty(num_blocks, block, kv_heads, head_dim, dtype=dtype)
        advise_huge([tensor_range(t)], collapse=False, outward=False)
        return t.normal_(generator=gen)

    layers = int(args["layers"])
    caches = [(cache(), cache())] * layers if args["hot"] == "1" else [(cache(), cache()) for _ in range(layers)]
    scale = head_dim**-0.5
    ops.paged_decode(q, *caches[0], tables, lens, scale)
    times = []
    for _ in range(int(args["repeats"])):
        start = time.perf_counter()
        for k, v in caches:
            ops.paged_decode(q, k, v, tables, lens, scale)
        times.append((time.perf_counter() - start) / layers)
    per_layer = statistics.median(times)
    read = 2 * seqs * context * kv_heads * head_dim * torch.finfo(dtype).bits // 8
    print(f"paged_decode {args['dtype']} {seqs} x {context}, {heads}/{kv_heads} heads of {head_dim}, "
          f"{args['placement']} blocks{' (hot)' if args['hot'] == '1' else ''}, {args['threads']} threads: "
          f"{per_layer * 1e6:.0f} us a layer, {read / per_layer / 1e9:.1f} GB/s of cache read")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
