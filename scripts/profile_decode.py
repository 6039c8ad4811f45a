"""One decode step of the reference engine, timed and profiled op by op.

    python scripts/profile_decode.py model=llama-107m precision=bf16 batch=2,32 context=160
    python scripts/profile_decode.py model=llama-107m prefill=16 context=128     # a prefill step of 16 x 128 tokens

Prints, per batch, the median step time over `repeats` steps and torch.profiler's
table of ops by self CPU time. Options are `key=value` (`table=0` skips the table, `rows=N` keeps its first N ops,
`threads=N` sets torch's threads; any other key is an engine option, e.g. `attention=eager kv_cache=contiguous`).
"""

from __future__ import annotations

import statistics
import sys

import torch

from engines.reference import ReferenceEngine
from engines.reference.decode_probe import (
    decode_batch,
    op_table,
    prefill_batch,
    release,
    step_times_s,
)


def main(argv: list[str]) -> None:
    args = dict(a.split("=", 1) for a in argv)
    model = args.pop("model", "llama-107m")
    batches = [int(b) for b in args.pop("batch", "2,32").split(",")]
    context = int(args.pop("context", "160"))
    repeats = int(args.pop("repeats", "10"))
    prefill = int(args.pop("prefill", "0"))  # > 0: a prefill step of that many sequences instead
    table = args.pop("table", "1") != "0"
    rows = int(args.pop("rows", "25"))
    if "threads" in args:
        torch.set_num_threads(int(args.pop("threads")))
    options = {k: _parse(v) for k, v in args.items()}
    if prefill:
        batches = [prefill]
        options.setdefault("max_num_batched_tokens", prefill * context)
    eng = ReferenceEngine(model=model, max_num_seqs=max(batches), max_model_len=context + 64, **options)
    for batch in batches:
        steps = prefill_batch(eng, batch, context) if prefill else decode_batch(eng, batch, context)
        step_times_s(eng, steps, 2)
        median_s = statistics.median(step_times_s(eng, steps, repeats))
        kind = f"prefill step of {batch} x {context} tokens" if prefill else (
            f"batch {batch} context {context}: decode step")
        print(f"{model} {eng.opts.precision} {kind} {median_s * 1e3:.1f} ms (median of {repeats})")
        if table:
            print(op_table(eng, steps, row_limit=rows))
        release(eng, steps)


def _parse(value: str):
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(value, value)


if __name__ == "__main__":
    main(sys.argv[1:])
