"""The collector thread: row cadence, CSV, source choice, robustness, prompt stop."""

from __future__ import annotations

import csv
import statistics
import time
from types import SimpleNamespace

import pytest

from llmperf.errors import ConfigError, UsageError
from llmperf.run.runner import telemetry_collected
from llmperf.telemetry import Collector, SamplerUnavailable
from llmperf.telemetry.options import TelemetryConfig
from llmperf.telemetry.sources import SAMPLERS


class StubSampler:
    """A device source that opens or not, and reads a fixed value or raises."""

    def __init__(self, name: str, available: bool = True, fails: bool = False) -> None:
        self.name, self.available, self.fails = name, available, fails
        self.unavailable: dict[str, str] = {}
        self.closed = False

    def open(self) -> None:
        if not self.available:
            raise SamplerUnavailable(f"no {self.name} here")

    def read(self) -> dict[str, float]:
        if self.fails:
            raise RuntimeError("device fell off the bus")
        return {f"{self.name}_value": 1.0}

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def stub_sources(monkeypatch):
    def install(nvml: StubSampler, torch_cuda: StubSampler) -> None:
        monkeypatch.setitem(SAMPLERS, "nvml", lambda idx: nvml)
        monkeypatch.setitem(SAMPLERS, "torch_cuda", lambda idx: torch_cuda)

    return install


def run_for(collector: Collector, seconds: float, t0: float | None = None):
    collector.start(t0)
    time.sleep(seconds)
    return collector.stop()


def test_one_row_per_interval_over_a_second() -> None:
    samples = run_for(Collector(interval_s=0.05, source="process"), 1.0)
    # 0, 0.05, ..., 1.0 plus the closing sample: 22 on an idle machine; shared cores may skip a few.
    assert 17 <= len(samples) <= 23
    gaps = [b.timestamp_s - a.timestamp_s for a, b in zip(samples[:-2], samples[1:-1], strict=True)]
    assert statistics.median(gaps) == pytest.approx(0.05, rel=0.2)
    assert all(s.values["rss_bytes"] > 0 for s in samples)


def test_timestamps_count_from_the_given_run_start() -> None:
    t0 = time.perf_counter() - 5.0
    samples = run_for(Collector(interval_s=0.05, source="process"), 0.1, t0=t0)
    assert samples[0].timestamp_s == pytest.approx(5.0, abs=0.05)


def test_stop_is_prompt_even_with_a_long_interval() -> None:
    collector = Collector(interval_s=10.0, source="process")
    collector.start()
    start = time.perf_counter()
    samples = collector.stop()
    assert time.perf_counter() - start < 0.5
    assert len(samples) == 2  # the opening and the closing reading
    assert collector._thread is None


def test_csv_has_timestamp_first_and_a_row_per_sample(tmp_path) -> None:
    collector = Collector(interval_s=0.05, source="process")
    samples = run_for(collector, 0.2)
    path = tmp_path / "telemetry.csv"
    collector.write_csv(path)
    with open(path) as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == [
        "timestamp_s",
        "rss_bytes",
        "cpu_pct",
        "sys_cpu_pct",
        "sys_mem_used_bytes",
    ]
    assert len(rows) == len(samples)
    for row, sample in zip(rows, samples, strict=True):
        assert float(row["timestamp_s"]) == pytest.approx(sample.timestamp_s, abs=1e-6)
        assert int(row["rss_bytes"]) == sample.values["rss_bytes"]  # bytes written as integers


def test_csv_leaves_cells_empty_where_a_value_was_not_read(tmp_path) -> None:
    collector = Collector(interval_s=0.05, source="process")
    collector.start()
    collector.stop()
    collector._samples[0].values["dram_bw_util_pct"] = 12.5
    collector.write_csv(tmp_path / "t.csv")
    with open(tmp_path / "t.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["dram_bw_util_pct"] for r in rows] == ["12.5", ""]


def test_auto_keeps_every_device_source_that_opens(stub_sources) -> None:
    stub_sources(StubSampler("nvml"), StubSampler("torch_cuda"))
    collector = Collector(source="auto")
    run_for(collector, 0.0)
    assert collector.sources_used == ["nvml", "torch_cuda", "process"]


def test_auto_falls_back_to_torch_cuda_then_process(stub_sources) -> None:
    stub_sources(StubSampler("nvml", available=False), StubSampler("torch_cuda"))
    collector = Collector(source="auto")
    run_for(collector, 0.0)
    assert collector.sources_used == ["torch_cuda", "process"]
    assert collector.summarize()["telemetry_unavailable"] == ["nvml: no nvml here"]

    stub_sources(StubSampler("nvml", available=False), StubSampler("torch_cuda", available=False))
    collector = Collector(source="auto")
    samples = run_for(collector, 0.0)
    assert collector.sources_used == ["process"]
    assert samples[0].values["rss_bytes"] > 0


def test_an_explicit_source_must_be_there(stub_sources) -> None:
    stub_sources(StubSampler("nvml", available=False), StubSampler("torch_cuda"))
    with pytest.raises(
        SamplerUnavailable, match="telemetry source 'nvml' is unavailable: no nvml here"
    ):
        Collector(source="nvml").start()


def test_a_failing_sampler_never_stops_the_others(stub_sources) -> None:
    broken = StubSampler("torch_cuda", fails=True)
    stub_sources(StubSampler("nvml", available=False), broken)
    collector = Collector(interval_s=0.02, source="auto")
    samples = run_for(collector, 0.2)
    assert len(samples) >= 5 and all(s.values["rss_bytes"] > 0 for s in samples)
    assert (
        "torch_cuda: read failed: RuntimeError('device fell off the bus')"
        in collector.unavailable()
    )
    assert broken.closed


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"source": "dcgm"},
            "source='dcgm': unknown telemetry source; valid: auto, nvml, torch_cuda, process",
        ),
        ({"interval_s": 0}, "interval_s=0: must be > 0"),
        ({"device_indices": [-1]}, r"device_indices=\[-1\]: indices must be >= 0"),
    ],
)
def test_bad_configuration_names_the_field(kwargs, message) -> None:
    with pytest.raises(ConfigError, match=message):
        TelemetryConfig(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"source": "dcgm"},
            "unknown telemetry source 'dcgm'; valid: auto, nvml, torch_cuda, process",
        ),
        ({"interval_s": 0}, "telemetry interval_s must be > 0, got 0"),
    ],
)
def test_a_collector_refuses_what_it_cannot_run(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        Collector(**kwargs)


class OutOfRangeSampler(StubSampler):
    def open(self) -> None:
        raise ValueError("device_indices [3] out of range; valid: 0..0")


def test_a_device_index_out_of_range_is_a_usage_error_and_closes_what_opened(stub_sources):
    nvml = StubSampler("nvml")
    stub_sources(nvml, OutOfRangeSampler("torch_cuda"))
    telemetry = TelemetryConfig(source="auto", device_indices=[3])
    run = SimpleNamespace(config=SimpleNamespace(telemetry=telemetry), collector=None)
    with pytest.raises(UsageError) as err, telemetry_collected(run):
        pass
    assert str(err.value) == (
        "telemetry.device_indices=[3]: device_indices [3] out of range; valid: 0..0"
    )
    assert nvml.closed and run.collector is None


def test_starting_twice_is_an_error() -> None:
    collector = Collector(source="process")
    collector.start()
    try:
        with pytest.raises(RuntimeError, match="already started"):
            collector.start()
    finally:
        collector.stop()


def test_summary_carries_source_interval_and_process_peaks() -> None:
    collector = Collector(interval_s=0.05, source="process")
    samples = run_for(collector, 0.2)
    summary = collector.summarize()
    assert summary["telemetry_source"] == "process"
    assert summary["telemetry_interval_s"] == 0.05
    assert summary["telemetry_num_samples"] == len(samples)
    assert summary["telemetry_peak_rss_bytes"] == max(s.values["rss_bytes"] for s in samples)
    assert summary["energy_j"] is None and summary["throttled"] is None


def test_sampling_at_50ms_uses_under_3pct_of_a_core() -> None:
    # CPU time, unlike throughput, is not swamped by other load on shared cores.
    # The main thread sleeps, so the process's CPU time is the collector's.
    # Opening the sources (importing torch, pynvml) is once per run, before the load.
    collector = Collector(interval_s=0.05)
    collector.start()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    time.sleep(1.0)
    cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
    samples = collector.stop()
    assert len(samples) >= 15
    assert cpu_s / wall_s < 0.03


def test_the_collector_reports_its_own_cpu_time() -> None:
    # While the main thread sleeps, the process's CPU time is the sampling thread's (plus
    # a little of the interpreter's): its own account must agree with the process's.
    pytest.importorskip("psutil")  # imported here, not inside the measured span
    collector = Collector(interval_s=0.01, source="process")
    cpu0 = time.process_time()
    collector.start()
    time.sleep(0.5)
    samples = collector.stop()
    process_cpu_s = time.process_time() - cpu0
    assert len(samples) >= 20
    assert 0 < collector.cpu_s <= process_cpu_s
    assert collector.cpu_s >= 0.5 * process_cpu_s
    summary = collector.summarize()
    assert summary["telemetry_collector_cpu_s"] == collector.cpu_s
    assert summary["telemetry_collector_cpu_per_sample_s"] == collector.cpu_s / len(samples)


def test_a_collector_restarts_with_fresh_samples() -> None:
    collector = Collector(interval_s=10.0, source="process")
    assert collector.interval_s == 10.0
    assert len(run_for(collector, 0.0)) == 2
    assert len(run_for(collector, 0.0)) == 2  # not 4: a second run does not inherit the first's
