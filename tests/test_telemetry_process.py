"""The process and torch.cuda samplers on this machine (and a scripted torch.cuda)."""

from __future__ import annotations

import os
import time

import pytest

from llmperf.telemetry import SamplerUnavailable
from llmperf.telemetry.process import ProcessSampler
from llmperf.telemetry.torch_cuda import TorchCudaSampler


def _proc_status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def _meminfo_bytes(field: str) -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


@pytest.fixture
def sampler():
    sampler = ProcessSampler()
    sampler.open()
    yield sampler
    sampler.close()


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_rss_matches_the_kernels_vmrss(sampler) -> None:
    rss_bytes = sampler.read()["rss_bytes"]
    assert rss_bytes == pytest.approx(_proc_status_bytes("VmRSS"), rel=0.05)
    assert 0 < sampler.read()["sys_mem_used_bytes"] < _meminfo_bytes("MemTotal")


def test_rss_grows_by_what_the_process_touches(sampler) -> None:
    import mmap

    size = 128 << 20
    # A fresh anonymous mapping: its pages become resident only as they are written
    # (memory the allocator already holds could be resident before).
    block = mmap.mmap(-1, size)
    before = sampler.read()["rss_bytes"]
    for offset in range(0, size, mmap.PAGESIZE):
        block[offset] = 1
    grown = sampler.read()["rss_bytes"] - before
    block.close()
    assert 0.9 * size < grown < 1.5 * size


def test_cpu_pct_matches_process_cpu_time(sampler) -> None:
    sampler.read()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - wall0 < 0.3:
        sum(range(1000))
    cpu_pct = sampler.read()["cpu_pct"]
    # Independent reference: CPU seconds the process used over the wall seconds that passed.
    expected = 100 * (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    assert cpu_pct == pytest.approx(expected, abs=20)
    assert 0 <= sampler.read()["sys_cpu_pct"] <= 100


def test_process_read_costs_well_under_3pct_of_a_50ms_interval(sampler) -> None:
    sampler.read()
    start = time.perf_counter()
    for _ in range(50):
        sampler.read()
    per_read_s = (time.perf_counter() - start) / 50
    assert per_read_s < 0.03 * 0.05


class FakeCuda:
    """torch.cuda's memory_stats for two devices."""

    def __init__(self, stats: dict[int, dict[str, int]]) -> None:
        self.stats = stats

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return len(self.stats)

    def memory_stats(self, index: int) -> dict[str, int]:
        return self.stats[index]


STATS = {
    0: {
        "allocated_bytes.all.current": 3 << 30,
        "reserved_bytes.all.current": 4 << 30,
        "allocated_bytes.all.peak": 5 << 30,
    },
    1: {
        "allocated_bytes.all.current": 1 << 30,
        "reserved_bytes.all.current": 2 << 30,
        "allocated_bytes.all.peak": 2 << 30,
    },
}


def test_torch_cuda_reads_allocator_stats_per_device() -> None:
    sampler = TorchCudaSampler(cuda=FakeCuda(STATS))
    sampler.open()
    values = sampler.read()
    assert values["gpu0_torch_allocated_bytes"] == 3 << 30
    assert values["gpu1_torch_reserved_bytes"] == 2 << 30
    assert values["gpu0_torch_peak_bytes"] == 5 << 30
    assert values["torch_allocated_bytes"] == 4 << 30 and values["torch_peak_bytes"] == 7 << 30


def test_torch_cuda_one_device_and_uninitialized_device() -> None:
    sampler = TorchCudaSampler(device_indices=[1], cuda=FakeCuda({0: {}, 1: {}}))
    sampler.open()
    # memory_stats is empty before CUDA is initialized: nothing allocated yet.
    assert sampler.read() == {
        "torch_allocated_bytes": 0.0,
        "torch_reserved_bytes": 0.0,
        "torch_peak_bytes": 0.0,
    }
    with pytest.raises(ValueError, match=r"device_indices \[2\] out of range"):
        TorchCudaSampler(device_indices=[2], cuda=FakeCuda(STATS)).open()


def test_torch_cuda_unavailable_without_cuda() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(SamplerUnavailable, match="torch.cuda is not available"):
        TorchCudaSampler().open()
