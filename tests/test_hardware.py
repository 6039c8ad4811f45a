"""Hardware profiles: YAML datasheets, validation, overrides, `auto` detection and the CPU probe."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from llmperf.hardware import detect, probe, registry
from llmperf.hardware.probe import ProbeResult
from llmperf.hardware.profile import HardwareProfile
from llmperf.hardware.registry import load_profile, profile_names, resolve_profile

GPU_PROFILES = [n for n in profile_names() if n not in ("auto", "cpu")]


def fake_probe_result(device: str = "cpu") -> ProbeResult:
    return ProbeResult(
        key=f"{device}|Fake CPU|threads=2",
        device=device,
        device_name="Fake CPU",
        num_threads=2,
        read_bw_bytes_per_s=40e9,
        flops={"fp32": 100e9, "bf16": 400e9},
    )


@pytest.fixture
def fake_probe(monkeypatch):
    calls = []

    def fake(device, force=False, cache_path=None):
        calls.append(device)
        return fake_probe_result(device)

    monkeypatch.setattr(registry, "probe", fake)
    return calls


def test_profiles_include_the_issue_devices_and_more():
    assert {"h100-sxm", "h200", "a100-80gb", "l4", "cpu", "auto"} <= set(profile_names())
    assert {"h100-pcie", "b200", "mi300x", "rtx-4090"} <= set(profile_names())


@pytest.mark.parametrize("name", GPU_PROFILES)
def test_every_gpu_profile_has_memory_bandwidth_bf16_flops_and_price(name):
    p = load_profile(name)
    assert p.name == name and p.kind == "gpu" and p.source == "datasheet"
    assert p.memory_bytes > 16 * 2**30
    assert 1e11 < p.peak_mem_bw_bytes_per_s < 2e13
    assert p.flops("bf16", "datasheet") > p.flops("fp32", "datasheet") > 1e12
    assert p.usd_per_hour > 0 and p.tdp_w > 0


def test_datasheet_figures_of_h100_and_h200():
    h100, h200 = load_profile("h100-sxm"), load_profile("h200")
    assert h100.peak_mem_bw_bytes_per_s == 3.35e12
    assert h200.peak_mem_bw_bytes_per_s == 4.8e12
    assert h100.flops("bf16", "datasheet") == h200.flops("bf16", "datasheet") == 989.4e12  # same compute die
    assert h100.memory_bytes == 80 * 2**30
    assert h200.memory_bytes == 141 * 2**30


def test_flops_accept_torch_dtype_names_as_engines_report_them():
    h100 = load_profile("h100-sxm")
    assert h100.flops("bfloat16") == h100.flops("torch.bfloat16") == h100.flops("bf16") == 989.4e12
    assert h100.flops("float32", "datasheet") == 66.9e12 and h100.flops("float16") == 989.4e12


def test_unknown_profile_name_lists_valid_choices():
    with pytest.raises(ValueError, match=r"unknown hardware profile 'h900'; valid: .*h100-sxm"):
        resolve_profile("h900")


def test_from_dict_reads_yaml11_exponents_written_without_a_sign():
    p = HardwareProfile.from_dict(
        {"name": "x", "peak_mem_bw_bytes_per_s": "3.35e12", "peak_flops": {"bf16": "1e15"}}
    )
    assert p.peak_mem_bw_bytes_per_s == 3.35e12 and p.flops("bf16", "datasheet") == 1e15


@pytest.mark.parametrize(
    ("d", "message"),
    [
        (
            {"name": "x", "usd_per_hour": "cheap"},
            r"hardware.usd_per_hour must be a number, got 'cheap'",
        ),
        ({"name": "x", "usd_per_hour": -1}, r"hardware.usd_per_hour must be >= 0"),
        ({"name": "x", "memory_bytes": 0}, r"hardware.memory_bytes must be > 0"),
        ({"name": "x", "kind": "tpu"}, r"hardware.kind 'tpu' is not valid; valid: gpu, cpu"),
        ({"name": "x", "peak_flops": {"int4": 1e12}}, r"unknown dtype 'int4' .*valid: fp32"),
        (
            {"name": "x", "bandwidth": 1e12},
            r"unknown hardware field 'bandwidth'; valid: name, kind",
        ),
    ],
)
def test_from_dict_rejects_bad_fields_naming_them(d, message):
    with pytest.raises(ValueError, match=message):
        HardwareProfile.from_dict(d)


def test_usd_per_hour_override_from_a_resolved_config_dict_keeps_the_datasheet():
    cfg = OmegaConf.create(
        {"name": "h100-sxm", "usd_per_hour": 3.25}
    )  # what hardware.usd_per_hour=3.25 gives
    p = resolve_profile(cfg)
    assert p.usd_per_hour == 3.25
    assert p.peak_mem_bw_bytes_per_s == 3.35e12 and p.flops("bf16", "datasheet") == 989.4e12


def test_a_full_hydra_group_dict_with_an_override_resolves_to_the_same_profile():
    full = load_profile("l4").to_dict() | {"usd_per_hour": 0.5}
    assert resolve_profile(OmegaConf.create(full)) == load_profile("l4", usd_per_hour=0.5)


def test_override_with_a_bad_value_names_the_field():
    with pytest.raises(ValueError, match="hardware.usd_per_hour must be a number"):
        resolve_profile({"name": "h200", "usd_per_hour": "a lot"})


@pytest.mark.parametrize(
    ("device_name", "profile"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("AMD Instinct MI300X", "mi300x"),
        # other memory, clocks or power: no datasheet rather than a wrong one
        ("NVIDIA L40S", None),
        ("NVIDIA H100 NVL", None),
        ("NVIDIA H200 NVL", None),
        ("NVIDIA GH200 480GB", None),
        ("NVIDIA A100-SXM4-40GB", None),
        ("NVIDIA A100 80GB PCIe", None),
        ("NVIDIA GeForce RTX 4090 D", None),
    ],
)
def test_driver_device_names_map_to_datasheet_profiles(device_name, profile):
    assert detect.profile_name_for_device(device_name) == profile


def test_auto_on_a_known_gpu_gives_its_datasheet_and_keeps_the_driver_name(monkeypatch):
    monkeypatch.setattr(detect, "detect_device", lambda: detect.Device("NVIDIA H200", 150.1e9))
    p = resolve_profile({"name": "auto", "kind": "cpu", "usd_per_hour": None, "peak_flops": {}})
    assert p.name == "h200" and p.device_name == "NVIDIA H200"
    assert p.peak_mem_bw_bytes_per_s == 4.8e12 and p.usd_per_hour == 3.50


def test_auto_on_an_unknown_gpu_keeps_its_memory_and_leaves_ceilings_unknown(monkeypatch):
    monkeypatch.setattr(detect, "detect_device", lambda: detect.Device("NVIDIA L40S", 48e9))
    p = resolve_profile("auto", probe_ceilings=False)
    assert (p.name, p.kind, p.source, p.memory_bytes) == ("nvidia-l40s", "gpu", "detected", 48e9)
    assert p.mem_bw() is None and p.flops("bf16") is None


def test_auto_on_cpu_fills_measured_ceilings_from_the_probe_and_applies_overrides(
    monkeypatch, fake_probe
):
    monkeypatch.setattr(detect, "detect_device", lambda: None)
    p = resolve_profile({"name": "auto", "kind": "cpu", "usd_per_hour": 0.25, "peak_flops": {}})
    assert fake_probe == ["cpu"]
    assert (p.name, p.kind, p.source, p.device_name) == ("cpu", "cpu", "probe", "Fake CPU")
    assert p.peak_mem_bw_bytes_per_s is None and p.measured_mem_bw_bytes_per_s == 40e9
    assert p.mem_bw() == 40e9 and p.peak_source() == "measured"
    assert p.flops("bf16") == 400e9 and p.flops("bf16", "datasheet") is None
    assert p.usd_per_hour == 0.25
    assert p.memory_bytes > 0  # from the OS


def test_a_gpu_datasheet_profile_is_not_probed_on_a_machine_without_it(fake_probe):
    p = resolve_profile("h100-sxm", probe_ceilings=True)
    assert fake_probe == [] and not p.has_measured()


def test_importing_the_modules_probes_nothing_and_writes_no_cache(tmp_path):
    code = (
        "import llmperf.hardware.registry, llmperf.hardware.probe, llmperf.hardware.detect,"
        " llmperf.perf.roofline, llmperf.perf.cost, llmperf.perf.cli"
    )
    env = {**os.environ, "LLMPERF_CACHE_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=Path(__file__).parents[1])
    assert list(tmp_path.iterdir()) == []


# -- the CPU probe -------------------------------------------------------------


def test_probe_caches_by_cpu_model_and_thread_count_and_force_remeasures(tmp_path, monkeypatch):
    path = tmp_path / "probe.json"
    first = probe.probe(cache_path=path, read_bytes=64 * 2**20)
    key = f"v{probe.PROBE_VERSION}|cpu|{probe.cpu_model_name()}|threads={torch.get_num_threads()}"
    assert (
        first.key == key
        and json.loads(path.read_text())[key]["read_bw_bytes_per_s"] == first.read_bw_bytes_per_s
    )

    def no_measuring(*args, **kwargs):
        raise AssertionError("a cached probe must not measure again")

    monkeypatch.setattr(probe, "measure", no_measuring)
    assert probe.probe(cache_path=path) == first
    monkeypatch.undo()
    again = probe.probe(cache_path=path, force=True, read_bytes=64 * 2**20)
    assert again.measured_at > first.measured_at


def test_probe_cache_is_shared_through_llmperf_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMPERF_CACHE_DIR", str(tmp_path))
    assert probe.cache_dir() == tmp_path
    monkeypatch.setattr(probe, "measure", lambda device, read_bytes=None: fake_probe_result())
    assert probe.probe().read_bw_bytes_per_s == 40e9
    assert (tmp_path / "probe.json").is_file()


def test_a_corrupt_cache_file_is_measured_again(tmp_path, monkeypatch):
    path = tmp_path / "probe.json"
    path.write_text("{not json")
    monkeypatch.setattr(probe, "measure", lambda device, read_bytes=None: fake_probe_result())
    assert probe.probe(cache_path=path).read_bw_bytes_per_s == 40e9


def test_probe_gives_plausible_cpu_figures_in_bounded_time():
    start = time.perf_counter()
    result = probe.measure("cpu")
    elapsed = time.perf_counter() - start
    # A guard against a probe that runs away, not a speed target: the probe takes 1-7 s
    # here depending on the machine's memory bandwidth and load (speed targets live in
    # tests/benchmarks).
    assert elapsed < 60.0
    assert (
        result.read_bytes >= 256 * 2**20 and result.read_bytes >= 8 * probe.last_level_cache_bytes()
    )
    assert 1e9 < result.read_bw_bytes_per_s < 2e12
    assert 1e9 < result.flops["fp32"] < 1e14 and 1e9 < result.flops["bf16"] < 1e14


def test_probe_read_bandwidth_predicts_a_memory_bound_matrix_vector_product():
    """The roofline uses the probe's bandwidth for decode, which is matrix-vector work.

    The two are timed in alternation and compared round by round (median), so
    that both see the same load from other processes on a shared machine.
    """
    num_bytes = probe.default_read_bytes("cpu")
    weight = torch.ones(num_bytes // 4 // 4096, 4096)
    x, y = torch.ones(4096), torch.ones(num_bytes // 4)
    ratios = []  # gemv bandwidth / reduction bandwidth, round by round
    for _ in range(8):
        reduce_s = probe._timed("cpu", lambda: torch.sum(y))
        ratios.append(reduce_s / probe._timed("cpu", lambda: weight @ x))
    ratio = statistics.median(ratios)
    assert 0.25 < ratio < 4.0


def test_last_level_cache_size_is_read_from_sysfs():
    size = probe.last_level_cache_bytes()
    index3 = Path("/sys/devices/system/cpu/cpu0/cache/index3/size")
    if index3.is_file():
        assert size >= probe._parse_size(index3.read_text().strip())
    assert probe._parse_size("32768K") == 32 * 2**20 and probe._parse_size("2M") == 2 * 2**20
