"""`engine.attention=auto` and `engine.fused_ops=auto`, the defaults: what they pick per device,
head dim and compile setting, that info() says so, and that the path picked generates the greedy
tokens of the slow path (sdpa over a gathered cache, torch's ops)."""

from __future__ import annotations

import pytest

from engines.reference.attention.cpu import CpuAttention
from engines.reference.engine import ReferenceEngine
from engines.reference.fast_path import resolve_fast_path
from engines.reference.fused_ops import CpuRMSNorm
from engines.reference.options import ReferenceEngineConfig
from llmperf.errors import ConfigError


def ok():
    return None


def no_compiler():
    return "no C++ compiler"


@pytest.mark.parametrize("device,head_dim,compile,ops_error,want", [
    ("cpu", 64, False, ok, ("cpu", True)),
    ("cpu", 128, True, ok, ("cpu", False)),  # inductor cannot trace the fused ops
    ("cpu", 40, False, ok, ("sdpa", True)),  # the kernel takes multiples of 16 only
    ("cpu", 272, False, ok, ("sdpa", True)),  # ... up to 256
    ("cpu", 64, False, no_compiler, ("sdpa", False)),
    ("cuda", 64, False, ok, ("sdpa", False)),
])
def test_auto_picks_per_device_and_model(device, head_dim, compile, ops_error, want):
    got = resolve_fast_path("auto", "auto", device, head_dim, compile, ops_error)
    assert (got["attention"], got["fused_ops"]) == want
    assert (got["attention_requested"], got["fused_ops_requested"]) == ("auto", "auto")
    assert got["fast_path"].startswith("auto: attention " + want[0])


def test_auto_says_why_it_fell_back():
    got = resolve_fast_path("auto", "auto", "cpu", 64, False, no_compiler)
    assert got["fast_path"] == "auto: attention sdpa (no C++ compiler); fused ops off (no C++ compiler)"


def test_explicit_values_are_kept_and_never_probe_the_compiler():
    def must_not_be_called():
        raise AssertionError("explicit options need no probe")

    got = resolve_fast_path("eager", "false", "cpu", 64, False, must_not_be_called)
    assert (got["attention"], got["fused_ops"], got["fast_path"]) == ("eager", False, None)
    got = resolve_fast_path("triton", True, "cuda", 64, False, must_not_be_called)
    assert (got["attention"], got["fused_ops"], got["fused_ops_requested"]) == ("triton", True, "true")


def test_fused_ops_reads_bools_and_hydras_words():
    assert ReferenceEngineConfig().fused_ops == "auto"
    assert ReferenceEngineConfig().attention == "auto"
    assert ReferenceEngineConfig(fused_ops=True).fused_ops == "true"
    assert ReferenceEngineConfig(fused_ops="False").fused_ops == "false"  # `engine.fused_ops=false` via Hydra
    with pytest.raises(ConfigError, match="fused_ops='maybe'"):
        ReferenceEngineConfig(fused_ops="maybe")


def test_defaults_run_the_fast_path_say_so_and_match_the_slow_path():
    prompts = [[3 + (i * 13 + j) % 250 for j in range(3 + 21 * i)] for i in range(4)]
    kw = dict(model="tiny", precision="fp32", max_num_seqs=4, max_model_len=160)
    slow = ReferenceEngine(**kw, attention="sdpa", fused_ops=False)
    fast = ReferenceEngine(**kw)
    info = fast.info()
    assert (info["attention"], info["fused_ops"]) == ("cpu", True)
    assert (info["attention_requested"], info["fused_ops_requested"]) == ("auto", "auto")
    assert info["fast_path"] == "auto: attention cpu (the C++ decode kernel); fused ops on"
    assert (slow.info()["attention"], slow.info()["fused_ops"], slow.info()["fast_path"]) == ("sdpa", False, None)
    assert isinstance(fast.backend, CpuAttention) and isinstance(fast.model.model.norm, CpuRMSNorm)
    want = [o.token_ids for o in slow.generate(prompts, max_tokens=20, ignore_eos=True)]
    got = [o.token_ids for o in fast.generate(prompts, max_tokens=20, ignore_eos=True)]
    assert got == want
    assert fast.backend.kernel_rows > 0
