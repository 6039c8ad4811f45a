"""The one registry mechanism every swappable family uses."""

from __future__ import annotations

import sys

import pytest

from engines.reference.attention import BACKENDS
from engines.reference.kv_cache import KV_CACHES
from engines.reference.precision import PRECISIONS
from engines.reference.presets import PRESETS
from engines.reference.scheduler import SCHEDULERS
from engines.registry import ENGINE_CONFIGS, ENGINES
from llmperf.errors import ConfigError
from llmperf.hardware.registry import PROFILES
from llmperf.registry import Registry
from llmperf.telemetry.sources import SAMPLERS
from llmperf.workload.arrivals import ARRIVALS
from llmperf.workload.datasets import DATASET_FORMATS
from llmperf.workload.lengths import LENGTHS


def test_a_lazy_member_is_imported_on_first_use_only(tmp_path, monkeypatch):
    (tmp_path / "lazy_member_mod.py").write_text("class Thing:\n    def __init__(self, x):\n        self.x = x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("thing", {"thing": "lazy_member_mod:Thing"})
    assert reg.names == ("thing",) and "thing" in reg and reg.choices == ("thing",)
    assert "lazy_member_mod" not in sys.modules  # listing the names imports nothing
    assert reg.build("thing", 3).x == 3
    assert "lazy_member_mod" in sys.modules and reg.get("thing") is reg.get("thing")
    monkeypatch.delitem(sys.modules, "lazy_member_mod")


def test_an_unknown_name_names_the_family_and_every_choice():
    reg = Registry("colour", {"red": 1, "blue": 2}, also_valid=("auto",))
    with pytest.raises(ValueError, match=r"^unknown colour 'green'; valid: auto, red, blue$"):
        reg.get("green")
    with pytest.raises(ConfigError, match=r"^paint='green': unknown colour; valid: auto, red, blue$"):
        reg.check("paint", "green")
    reg.check("paint", "auto")  # a choice the caller handles itself
    assert reg.get("green", None) is None


def test_find_lists_members_on_first_use():
    calls = []

    def find():
        calls.append(1)
        return {"a": 1}

    reg = Registry("file", find=find)
    assert calls == []
    assert reg.names == ("a",) and reg.names == ("a",) and calls == [1]


@pytest.mark.parametrize(
    ("registry", "members"),
    [
        (ENGINES, {"reference", "hf", "openai", "synthetic"}),
        (ENGINE_CONFIGS, {"reference", "hf", "openai", "synthetic"}),
        (BACKENDS, {"eager", "sdpa", "triton"}),
        (SCHEDULERS, {"sequential", "static", "dynamic", "continuous", "chunked"}),
        (KV_CACHES, {"contiguous", "paged"}),
        (PRECISIONS, {"fp32", "bf16", "fp16", "int8", "fp8"}),
        (ARRIVALS, {"offline", "constant", "poisson", "gamma", "closed", "trace"}),
        (LENGTHS, {"fixed", "uniform", "normal", "lognormal", "dataset"}),
        (DATASET_FORMATS, {"auto", "sharegpt", "table"}),
        (SAMPLERS, {"nvml", "torch_cuda", "process"}),
        (PROFILES, {"cpu", "h100-sxm", "h200", "a100-80gb"}),
        (PRESETS, {"tiny", "smollm2-135m", "llama-3.1-8b"}),
    ],
)
def test_every_family_is_a_registry(registry, members):
    assert isinstance(registry, Registry)
    assert members <= set(registry.names)
