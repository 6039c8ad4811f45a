"""The collector must not slow the run it measures: at a 50 ms interval, output tokens/s
within 3% of the same run without it.

    python -m pytest tests/benchmarks/test_telemetry_overhead.py -m slow -s

Runs come in pairs, back to back (the order alternating from pair to pair), so a drifting
machine slows both runs of a pair alike; the median of the pairs' on/off ratios is compared.
"""

from __future__ import annotations

import statistics

import pytest
from runs import run

SCENARIO = [
    "scenario=offline",
    "scenario.num_requests=96",
    "scenario.prompt_tokens.value=128",
    "scenario.output_tokens.value=96",
    "engine.max_num_seqs=16",
    "report.enabled=false",
    "hardware=cpu",
]


@pytest.mark.slow
def test_collector_at_50_ms_costs_under_3_percent_of_output_throughput(tmp_path):
    tps = {"off": [], "on": []}
    for i in range(8):
        for mode in ("off", "on") if i % 2 else ("on", "off"):
            telemetry = ["telemetry.enabled=false"] if mode == "off" else ["telemetry.interval_s=0.05"]
            summary = run(tmp_path / f"{mode}{i}", *SCENARIO, *telemetry)
            tps[mode].append(summary["output_throughput_tps"])
            if mode == "on":
                assert summary["telemetry_num_samples"] >= summary["duration_s"] / 0.05 * 0.8
    ratio = statistics.median(on / off for on, off in zip(tps["on"], tps["off"], strict=True))
    print(f"\noutput tok/s, collector off: {[round(t) for t in tps['off']]}")
    print(f"output tok/s, collector on (50 ms): {[round(t) for t in tps['on']]}")
    print(f"median of the pairs' on / off = {ratio:.3f}")
    assert ratio >= 0.97
