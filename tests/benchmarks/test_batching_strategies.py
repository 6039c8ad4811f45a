"""Batching strategies side by side on one machine, in one process.

The workload of the batching issue: 64 requests at t=0 (offline), prompt lengths
uniform 16-512, output lengths uniform 8-256, seeded (`scenario=mixed-offline`), on
smollm2-135m: a model whose steps cost real work on a CPU (on `tiny` a step is
mostly fixed overhead, whatever its batch). About 7 minutes on 2 cores.
Continuous batching must deliver at least 1.5x the output tokens/s of static
batching, and chunked prefill must keep the p99 inter-token latency below
continuous batching's (long prompts arrive while other sequences decode).

    python -m pytest tests/benchmarks/test_batching_strategies.py -m slow -s

The same comparison as an llmperf sweep with its report:
    llmperf -m scenario=mixed-offline model=smollm2-135m engine.batching=static,continuous,chunked \\
        engine.max_batch_size=16 engine.max_num_seqs=16 engine.max_num_batched_tokens=128
"""

from __future__ import annotations

import pytest
from runs import run

ENGINE = [
    "model=smollm2-135m",
    "engine.max_batch_size=16",
    "engine.max_num_seqs=16",
    "engine.max_num_batched_tokens=128",
]


@pytest.mark.slow
def test_continuous_beats_static_and_chunked_keeps_itl_low(tmp_path):
    summaries = {
        b: run(tmp_path / b, "scenario=mixed-offline", f"engine.batching={b}", *ENGINE, "report.enabled=false")
        for b in ("static", "continuous", "chunked")
    }
    for b, s in summaries.items():
        print(
            f"\n{b:10s} output {s['output_throughput_tps']:7.1f} tok/s   "
            f"ITL p99 {s['itl_s']['p99'] * 1e3:6.1f} ms   TTFT p99 {s['ttft_s']['p99'] * 1e3:7.1f} ms"
        )
    ratio = summaries["continuous"]["output_throughput_tps"] / summaries["static"]["output_throughput_tps"]
    print(f"continuous / static output tokens/s = {ratio:.2f}")
    assert all(s["num_completed"] == 64 for s in summaries.values())
    assert ratio >= 1.5
    assert summaries["chunked"]["itl_s"]["p99"] < summaries["continuous"]["itl_s"]["p99"]
