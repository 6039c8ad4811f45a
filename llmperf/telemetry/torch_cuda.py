"""The torch.cuda sampler: what PyTorch's caching allocator holds, which NVML cannot see."""

from __future__ import annotations

import importlib
from typing import Any

from llmperf.telemetry.sample import SamplerUnavailable, merge_devices


def cuda_device_uuids() -> list[str] | None:
    """UUIDs of the CUDA devices this process sees, in CUDA index order; None without CUDA.

    CUDA_VISIBLE_DEVICES is already applied by CUDA, so index i here is the
    index a `cuda:i` tensor lives on.
    """
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    try:
        return [
            str(torch.cuda.get_device_properties(i).uuid) for i in range(torch.cuda.device_count())
        ]
    except (RuntimeError, AttributeError):  # CUDA init failed, or a torch without .uuid
        return None


class TorchCudaSampler:
    """torch_allocated_bytes, torch_reserved_bytes and torch_peak_bytes per device.

    `torch_peak_bytes` is the allocator's peak since the process started or since
    the engine last called `torch.cuda.reset_peak_memory_stats`.
    """

    name = "torch_cuda"

    def __init__(self, device_indices: list[int] | None = None, cuda: Any = None) -> None:
        self.device_indices = device_indices
        self.unavailable: dict[str, str] = {}
        self._cuda = cuda  # None: the real torch.cuda, imported on open()

    def open(self) -> None:
        if self._cuda is None:
            try:
                self._cuda = importlib.import_module("torch").cuda
            except ImportError as e:
                raise SamplerUnavailable(f"torch is not installed: {e}") from e
        if not self._cuda.is_available():
            raise SamplerUnavailable("torch.cuda is not available")
        count = self._cuda.device_count()
        if self.device_indices is None:
            self.device_indices = list(range(count))
        bad = [i for i in self.device_indices if not 0 <= i < count]
        if bad:
            raise ValueError(f"device_indices {bad} out of range; valid: 0..{count - 1}")

    def read(self) -> dict[str, float]:
        per_device = {}
        for index in self.device_indices:
            # One memory_stats call gives all three figures; memory_allocated() and
            # friends would each rebuild the same dict.
            stats = self._cuda.memory_stats(index)
            per_device[index] = {
                "torch_allocated_bytes": float(stats.get("allocated_bytes.all.current", 0)),
                "torch_reserved_bytes": float(stats.get("reserved_bytes.all.current", 0)),
                "torch_peak_bytes": float(stats.get("allocated_bytes.all.peak", 0)),
            }
        return merge_devices(per_device)

    def close(self) -> None:
        """Nothing to release: the allocator belongs to the engine."""
