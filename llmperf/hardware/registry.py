"""Hardware profiles by name: `scenarios/hardware/<name>.yaml`, plus `auto`.

`resolve_profile` is what a run calls: it takes the name or the resolved config
dict (with overrides such as `hardware.usd_per_hour=3.0` already applied),
detects the device for `auto`, and fills measured ceilings from the probe
where a profile has none (always for a CPU). Nothing here runs at import time.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import psutil
import torch
import yaml

from llmperf.hardware import detect
from llmperf.hardware.probe import ProbeResult, probe
from llmperf.hardware.profile import HardwareProfile
from llmperf.registry import Registry

AUTO = "auto"
# Fields of auto.yaml that describe detection, not user overrides.
_AUTO_OWN_FIELDS = ("name", "kind", "source", "device_name")


def profile_dir() -> Any:
    return resources.files("scenarios") / "hardware"


def _profile_files() -> dict[str, Any]:
    files = {p.name[: -len(".yaml")]: p for p in profile_dir().iterdir() if p.name.endswith(".yaml")}
    files.pop(AUTO, None)  # auto.yaml holds overrides of what is detected, not a profile
    return dict(sorted(files.items()))


# The datasheet profiles, one YAML file each, listed when first asked for.
PROFILES: Registry[Any] = Registry("hardware profile", find=_profile_files, also_valid=(AUTO,))


def profile_names() -> list[str]:
    """Every name `resolve_profile` accepts, `auto` included."""
    return sorted(PROFILES.choices)


def load_profile(name: str, **overrides: Any) -> HardwareProfile:
    """The datasheet profile `name` as its YAML states it, with `overrides` applied."""
    data = yaml.safe_load(PROFILES.get(name).read_text())
    profile = HardwareProfile.from_dict(data)
    return profile.with_overrides(**overrides) if overrides else profile


def resolve_profile(
    spec: str | Mapping[str, Any],
    *,
    probe_ceilings: bool | None = None,
    force_probe: bool = False,
    probe_cache: Path | None = None,
) -> HardwareProfile:
    """The profile a run uses.

    spec: a profile name, or a dict with `name` and any fields to override (the
        resolved `hardware` config group). `auto` detects the device; the dict's
        non-null fields then override what was detected.
    probe_ceilings: None probes (cached) when the profile has no known bandwidth
        (a CPU, an unknown GPU); True also measures a GPU with a datasheet;
        False never probes. A GPU profile is measured only where CUDA is present.
    """
    if isinstance(spec, str):
        name, given = spec, {}
    else:
        given = {k: _plain(v) for k, v in spec.items()}
        name = given.get("name")
        if not name:
            raise ValueError("hardware config needs a name; valid: " + ", ".join(profile_names()))
    if name == AUTO:
        profile = _detected()
        overrides = {
            k: v for k, v in given.items() if k not in _AUTO_OWN_FIELDS and v not in (None, {})
        }
    elif name in PROFILES:
        profile, overrides = load_profile(name), {k: v for k, v in given.items() if k != "name"}
    elif given.get("kind"):
        profile, overrides = HardwareProfile.from_dict(given), {}  # a profile defined in full
    else:
        PROFILES.get(name)  # raises, naming the valid profiles
    if overrides:
        profile = profile.with_overrides(**overrides)
    if _should_probe(profile, probe_ceilings, force_probe):
        device = "cuda" if profile.kind == "gpu" else "cpu"
        profile = with_probe(profile, probe(device, force=force_probe, cache_path=probe_cache))
    return profile


def with_probe(profile: HardwareProfile, result: ProbeResult) -> HardwareProfile:
    """The profile with the probe's figures as its measured ceilings."""
    changes: dict[str, Any] = {
        "measured_mem_bw_bytes_per_s": result.read_bw_bytes_per_s,
        "measured_stream_bw_bytes_per_s": result.stream_bw_bytes_per_s,
        "measured_layer_overhead_s": result.layer_overhead_s,
        "measured_flops": {**profile.measured_flops, **result.flops},
    }
    if profile.kind == "cpu":
        changes["device_name"] = result.device_name
        changes["source"] = "probe"
        if profile.memory_bytes is None:
            changes["memory_bytes"] = float(psutil.virtual_memory().total)
    return profile.with_overrides(**changes)


def _detected() -> HardwareProfile:
    device = detect.detect_device()
    if device is None:
        return load_profile("cpu")
    profile_name = detect.profile_name_for_device(device.name)
    if profile_name is None:
        return detect.unknown_gpu_profile(device)
    return load_profile(profile_name, device_name=device.name)


def _should_probe(profile: HardwareProfile, probe_ceilings: bool | None, force: bool) -> bool:
    if probe_ceilings is False:
        return False
    if profile.kind == "gpu" and not torch.cuda.is_available():
        return False  # a GPU that is not here cannot be measured
    if probe_ceilings or force:
        return True
    return profile.mem_bw() is None


def _plain(value: Any) -> Any:
    """Config containers (OmegaConf's included) as plain dicts."""
    return {k: _plain(v) for k, v in value.items()} if isinstance(value, Mapping) else value
