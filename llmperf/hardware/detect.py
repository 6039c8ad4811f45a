"""`hardware=auto`: find the device this process will run on.

A CUDA device whose name matches a datasheet profile gets that profile
(`llmperf.hardware.registry.resolve_profile` does the loading); any other CUDA
device gets a profile with the memory the driver reports and no known ceilings
(a probe can measure them); without CUDA, the `cpu` profile. Device names are
the ones `torch.cuda.get_device_name` returns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from llmperf.hardware.profile import HardwareProfile

# Most specific first. Variants with other memory, clocks or power (H100 NVL,
# H200 NVL, A100 PCIe or 40GB, GH200, GB200, RTX 4090 D) match none of these
# on purpose: a wrong datasheet is worse than an unknown one.
DEVICE_PROFILES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bH100\b.*\bPCIe\b"), "h100-pcie"),
    (re.compile(r"\bH100\b.*\b(SXM|HBM3)\b"), "h100-sxm"),
    (re.compile(r"\bH200\b(?! NVL)"), "h200"),
    (re.compile(r"\bB200\b"), "b200"),
    (re.compile(r"\bA100-SXM4-80GB\b"), "a100-80gb"),
    (re.compile(r"\bL4\b"), "l4"),
    (re.compile(r"\bRTX 4090\b(?! D)"), "rtx-4090"),
    (re.compile(r"\bMI300X\b"), "mi300x"),
)


@dataclass(frozen=True)
class Device:
    name: str  # as the driver reports it
    memory_bytes: float


def detect_device() -> Device | None:
    """CUDA device 0 (ROCm devices too), or None on a CPU-only machine."""
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return Device(name=torch.cuda.get_device_name(0), memory_bytes=float(props.total_memory))


def profile_name_for_device(device_name: str) -> str | None:
    """The datasheet profile for a driver's device name, or None when none matches."""
    for pattern, profile_name in DEVICE_PROFILES:
        if pattern.search(device_name):
            return profile_name
    return None


def unknown_gpu_profile(device: Device) -> HardwareProfile:
    """What is known of a GPU without a datasheet profile: its name and memory."""
    slug = re.sub(r"[^a-z0-9]+", "-", device.name.lower()).strip("-") or "gpu"
    return HardwareProfile(
        name=slug,
        kind="gpu",
        memory_bytes=device.memory_bytes,
        device_name=device.name,
        source="detected",
    )
