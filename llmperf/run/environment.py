"""What a run ran on, for environment.json: versions, devices, git commit, command line,
and the hardware profile the run's figures used."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import llmperf

PACKAGES = ("torch", "triton", "transformers", "numpy", "hydra-core", "omegaconf", "nvidia-ml-py")
PROJECT_ROOT = Path(llmperf.__file__).resolve().parent.parent


def collect_environment(hardware: dict[str, Any], argv: list[str]) -> dict[str, Any]:
    """`hardware`: the resolved profile's dict (what `hardware=auto` became)."""
    return {
        "llmperf_version": llmperf.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "command_line": argv,
        "cwd": os.getcwd(),
        "packages": {name: _package_version(name) for name in PACKAGES},
        "torch": _torch_facts(),
        "nvidia_driver": _nvidia_driver_version(),
        "git": _git_facts(),
        "hardware": hardware,
    }


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _torch_facts() -> dict[str, Any] | None:
    try:
        import torch  # the engines have imported it already
    except ImportError:
        return None
    facts: dict[str, Any] = {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cuda_available": torch.cuda.is_available(),
        "num_threads": torch.get_num_threads(),
        "devices": [],
    }
    if facts["cuda_available"]:
        facts["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return facts


def _cpu_model() -> str | None:
    """The CPU's model name (Linux /proc/cpuinfo, else what the platform module knows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def _nvidia_driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no GPU, no library: all mean "none here"
        return None
    return version.decode() if isinstance(version, bytes) else version


def _git_facts() -> dict[str, Any] | None:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()

    try:
        return {
            "commit": git("rev-parse", "HEAD"),
            "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        }
    except (OSError, subprocess.SubprocessError):
        return None
