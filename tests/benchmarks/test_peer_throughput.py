"""The reference engine against transformers' generate on the same preset and workload.

64 requests at t=0 (`scenario=offline`: prompts of 256 tokens, outputs of 128), the
reference engine with continuous batching against `engine=hf` (its own static
batching of up to 8 padded requests and its own KV cache), one after the other in
one process.

    python -m pytest tests/benchmarks/test_peer_throughput.py -m slow -s
    llmperf -m engine=reference,hf scenario=offline          # the same, with reports
"""

from __future__ import annotations

import pytest
from runs import run


@pytest.mark.slow
@pytest.mark.parametrize("model", ["tiny"])
def test_reference_continuous_batching_doubles_hf_generate_throughput(tmp_path, model):
    common = ["scenario=offline", f"model={model}", "report.enabled=false"]
    ref = run(tmp_path / "reference", *common, "engine=reference", "engine.batching=continuous")
    hf = run(tmp_path / "hf", *common, "engine=hf")
    ratio = ref["output_throughput_tps"] / hf["output_throughput_tps"]
    print(
        f"\n{model}: reference {ref['output_throughput_tps']:.0f} tok/s, "
        f"hf {hf['output_throughput_tps']:.0f} tok/s, ratio {ratio:.2f}"
    )
    assert ref["num_completed"] == hf["num_completed"] == 64
    assert ratio >= 2.0
