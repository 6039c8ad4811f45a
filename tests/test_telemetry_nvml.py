"""The NVML sampler against a scripted fake NVML: values, fallbacks, field-by-field degradation."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter

import pynvml
import pytest

from llmperf.telemetry import Collector, SamplerUnavailable
from llmperf.telemetry.devices import normalize_uuid
from llmperf.telemetry.gpm import GPM_METRICS
from llmperf.telemetry.nvml import FIELDS, NvmlSampler
from llmperf.telemetry.sources import SAMPLERS
from llmperf.telemetry.throttle import clock_event_reasons

NOT_SUPPORTED = 3
UNKNOWN = 999
GPM_IDS = {"dram_bw_util_pct": 10, "sm_util_pct": 2, "sm_occupancy_pct": 3, "tensor_util_pct": 5}


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {NOT_SUPPORTED: "Not Supported", UNKNOWN: "Unknown Error"}.get(
            self.value, f"error {self.value}"
        )


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


class FakeDevice:
    """One GPU's state. Counters (energy, GPM activity) integrate the current rates over time."""

    def __init__(self, uuid: str, **state) -> None:
        self.uuid = uuid
        self.mem_used_v2 = 40e9
        self.mem_used_v1 = 40.5e9  # v1 counts driver-reserved memory as used
        self.mem_total = 80e9
        self.util_gpu, self.util_mem = 97, 61
        self.power_instant_mw = 412_500
        self.power_average_mw = 398_000
        self.power_instant_status = 0
        self.energy_mj = 9_000_000_000.0  # since driver load: large, only deltas mean anything
        self.sm_clock, self.mem_clock = 1980, 2619
        self.temperature = 61
        self.reasons = 0x0
        self.gpm_supported = True
        self.gpm_pct = {10: 40.0, 2: 90.0, 3: 30.0, 5: 55.0}  # metric id -> current activity %
        self.gpm_busy_s = dict.fromkeys(self.gpm_pct, 0.0)  # integrated activity
        self.gpm_status: dict[int, int] = {}
        self.last_s: float | None = None
        self.__dict__.update(state)


class FakeGpmSample:
    def __init__(self) -> None:
        self.time_s: float | None = None
        self.busy_s: dict[int, float] = {}
        self.freed = False


class FakeMetricsGet:
    def __init__(self) -> None:
        self.version = self.numMetrics = 0
        self.sample1 = self.sample2 = None
        self.metrics = [
            type("Metric", (), {"metricId": 0, "nvmlReturn": 0, "value": 0.0})() for _ in range(8)
        ]


class FakeNvml:
    """A stand-in for the pynvml module: the same names, scripted devices, failures on demand.

    `fail[name] = n` makes the function `name` raise NotSupported from its (n+1)th call on;
    `flaky[name] = {k, ...}` makes its kth calls raise an Unknown Error, which may pass.
    """

    NVMLError = FakeNVMLError
    NVML_SUCCESS = 0
    NVML_ERROR_NOT_SUPPORTED = NOT_SUPPORTED
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    NVML_FI_DEV_POWER_INSTANT = 186
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
    NVML_TEMPERATURE_GPU = 0
    nvmlMemory_v2 = 0x02000028
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_DRAM_BW_UTIL = 10
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_SM_OCCUPANCY = 3
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
    c_nvmlGpmMetricsGet_t = FakeMetricsGet

    def __init__(self, devices: list[FakeDevice], clock=None, init_error: bool = False) -> None:
        self.devices = devices
        self.clock = clock or FakeClock()
        self.init_error = init_error
        self.fail: dict[str, int] = {}
        self.flaky: dict[str, set[int]] = {}
        self.mig_devices: list[FakeDevice] = []
        self.calls: Counter[str] = Counter()
        self.initialized = 0

    def _call(self, name: str) -> None:
        self.calls[name] += 1
        if name in self.fail and self.calls[name] > self.fail[name]:
            raise FakeNVMLError(NOT_SUPPORTED)
        if self.calls[name] in self.flaky.get(name, ()):
            raise FakeNVMLError(UNKNOWN)

    def _integrate(self, dev: FakeDevice) -> None:
        now_s = self.clock()
        if dev.last_s is not None:
            dt = now_s - dev.last_s
            dev.energy_mj += dev.power_instant_mw * dt
            for metric_id, pct in dev.gpm_pct.items():
                dev.gpm_busy_s[metric_id] += pct / 100 * dt
        dev.last_s = now_s

    def nvmlInit(self) -> None:
        self._call("nvmlInit")
        if self.init_error:
            raise FakeNVMLError(12)
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self.initialized -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._call("nvmlDeviceGetCount")
        return len(self.devices)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeDevice:
        for dev in self.mig_devices:
            if dev.uuid == uuid:
                return dev
        raise FakeNVMLError(6)  # Not Found

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        return self.devices[index]

    def nvmlDeviceGetUUID(self, dev: FakeDevice) -> str:
        return dev.uuid

    def nvmlDeviceGetMemoryInfo(self, dev: FakeDevice, version=None):
        self._call("nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo")
        used = dev.mem_used_v2 if version else dev.mem_used_v1
        return type(
            "Memory", (), {"used": used, "total": dev.mem_total, "free": dev.mem_total - used}
        )

    def nvmlDeviceGetUtilizationRates(self, dev: FakeDevice):
        self._call("nvmlDeviceGetUtilizationRates")
        return type("Utilization", (), {"gpu": dev.util_gpu, "memory": dev.util_mem})

    def nvmlDeviceGetFieldValues(self, dev: FakeDevice, field_ids: list[int]):
        self._call("nvmlDeviceGetFieldValues")
        assert field_ids == [self.NVML_FI_DEV_POWER_INSTANT]
        value = type("Value", (), {"uiVal": dev.power_instant_mw, "dVal": -1.0})
        return [
            type(
                "FieldValue",
                (),
                {"nvmlReturn": dev.power_instant_status, "valueType": 1, "value": value},
            )
        ]

    def nvmlDeviceGetPowerUsage(self, dev: FakeDevice) -> int:
        self._call("nvmlDeviceGetPowerUsage")
        return dev.power_average_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, dev: FakeDevice) -> int:
        self._call("nvmlDeviceGetTotalEnergyConsumption")
        self._integrate(dev)
        return round(dev.energy_mj)

    def nvmlDeviceGetClockInfo(self, dev: FakeDevice, clock_type: int) -> int:
        self._call(f"nvmlDeviceGetClockInfo[{clock_type}]")
        return dev.sm_clock if clock_type == self.NVML_CLOCK_SM else dev.mem_clock

    def nvmlDeviceGetTemperature(self, dev: FakeDevice, sensor: int) -> int:
        self._call("nvmlDeviceGetTemperature")
        return dev.temperature

    def nvmlDeviceGetCurrentClocksEventReasons(self, dev: FakeDevice) -> int:
        self._call("nvmlDeviceGetCurrentClocksEventReasons")
        return dev.reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, dev: FakeDevice) -> int:
        self._call("nvmlDeviceGetCurrentClocksThrottleReasons")
        return dev.reasons

    def nvmlGpmQueryDeviceSupport(self, dev: FakeDevice):
        self._call("nvmlGpmQueryDeviceSupport")
        return type("Support", (), {"isSupportedDevice": int(dev.gpm_supported)})

    def nvmlGpmSampleAlloc(self) -> FakeGpmSample:
        return FakeGpmSample()

    def nvmlGpmSampleFree(self, sample: FakeGpmSample) -> None:
        sample.freed = True

    def nvmlGpmSampleGet(self, dev: FakeDevice, sample: FakeGpmSample) -> FakeGpmSample:
        self._call("nvmlGpmSampleGet")
        self._integrate(dev)
        sample.time_s, sample.busy_s, sample.device = self.clock(), dict(dev.gpm_busy_s), dev
        return sample

    def nvmlGpmMetricsGet(self, request: FakeMetricsGet) -> FakeMetricsGet:
        self._call("nvmlGpmMetricsGet")
        first, second = request.sample1, request.sample2
        elapsed_s = second.time_s - first.time_s
        for metric in request.metrics[: request.numMetrics]:
            status = second.device.gpm_status.get(metric.metricId, 0)
            metric.nvmlReturn = status
            busy_s = second.busy_s[metric.metricId] - first.busy_s[metric.metricId]
            metric.value = 100 * busy_s / elapsed_s if status == 0 else 0.0
        return request


def open_sampler(nvml: FakeNvml, cuda_uuids=None, device_indices=None) -> NvmlSampler:
    sampler = NvmlSampler(
        device_indices, nvml=nvml, cuda_uuids=lambda: cuda_uuids, clock=nvml.clock
    )
    sampler.open()
    return sampler


def test_fake_nvml_exposes_the_names_the_installed_pynvml_has() -> None:
    # The fake is only a valid stand-in if every name it scripts is a real pynvml name.
    scripted = [n for n in dir(FakeNvml) if n.startswith(("nvml", "NVML", "c_nvml"))]
    assert [n for n in scripted if not hasattr(pynvml, n)] == []
    for name in (
        "NVML_FI_DEV_POWER_INSTANT",
        "NVML_GPM_METRIC_DRAM_BW_UTIL",
        "NVML_GPM_METRIC_SM_UTIL",
        "NVML_GPM_METRIC_SM_OCCUPANCY",
        "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
        "nvmlMemory_v2",
        "NVML_CLOCK_SM",
        "NVML_CLOCK_MEM",
        "NVML_TEMPERATURE_GPU",
        "NVML_SUCCESS",
        "NVML_ERROR_NOT_SUPPORTED",
        "NVML_ERROR_NO_PERMISSION",
        "NVML_ERROR_FUNCTION_NOT_FOUND",
        "NVML_GPM_METRICS_GET_VERSION",
    ):
        assert getattr(FakeNvml, name) == getattr(pynvml, name), name
    assert set(GPM_METRICS.values()) <= set(dir(pynvml))


def test_clock_event_reasons_are_the_bits_nvml_defines() -> None:
    """The clocks-event API's bits, each once; 0x200 and 0x400 are not NVML's (only pynvml's
    deprecated throttle table names them, and nvmlClocksEventReasonAll excludes them)."""
    reasons = clock_event_reasons()
    assert sum(reasons) == pynvml.nvmlClocksEventReasonAll == 0x1FF
    assert set(reasons) == {1 << i for i in range(9)}
    for bit, name in reasons.items():
        camel = "".join(part.capitalize() for part in name.split("_"))
        assert getattr(pynvml, f"nvmlClocksEventReason{camel}") == bit, name


def test_importing_telemetry_touches_no_device_library() -> None:
    code = "import sys, llmperf.telemetry; print(sorted({'pynvml','torch','psutil'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_reads_memory_utilization_power_clocks_temperature_and_throttling() -> None:
    nvml = FakeNvml([FakeDevice("GPU-aaaa", reasons=0x4)])
    values = open_sampler(nvml).read()
    assert values["mem_used_bytes"] == 40e9  # the v2 struct
    assert values["mem_total_bytes"] == 80e9
    assert values["gpu_util_pct"] == 97 and values["mem_util_pct"] == 61
    assert values["power_w"] == pytest.approx(412.5)  # instant field, mW -> W
    assert values["sm_clock_mhz"] == 1980 and values["mem_clock_mhz"] == 2619
    assert values["temperature_c"] == 61
    assert values["throttle_reasons"] == 0x4 and values["throttled"] == 1.0
    assert values["energy_j"] == 0.0


def test_gpu_idle_clock_event_is_not_throttling() -> None:
    values = open_sampler(FakeNvml([FakeDevice("GPU-aaaa", reasons=0x1)])).read()
    assert values["throttle_reasons"] == 0x1 and values["throttled"] == 0.0


def test_memory_falls_back_to_v1_struct_when_v2_fails() -> None:
    nvml = FakeNvml([FakeDevice("GPU-aaaa")])
    nvml.fail["nvmlDeviceGetMemoryInfo_v2"] = 0
    sampler = open_sampler(nvml)
    assert sampler.read()["mem_used_bytes"] == 40.5e9
    assert sampler.read()["mem_used_bytes"] == 40.5e9
    assert nvml.calls["nvmlDeviceGetMemoryInfo_v2"] == 1  # abandoned after its one failure
    assert "memory" not in sampler.unavailable


def test_power_falls_back_to_power_usage_when_instant_field_unsupported() -> None:
    nvml = FakeNvml([FakeDevice("GPU-aaaa", power_instant_status=NOT_SUPPORTED)])
    assert open_sampler(nvml).read()["power_w"] == pytest.approx(398.0)


def test_failing_field_is_dropped_while_the_others_go_on() -> None:
    nvml = FakeNvml([FakeDevice("GPU-aaaa")])
    nvml.fail["nvmlDeviceGetTemperature"] = 2  # works twice, then NotSupported
    sampler = open_sampler(nvml)
    reads = [sampler.read() for _ in range(4)]
    assert [("temperature_c" in r) for r in reads] == [True, True, False, False]
    assert all(r["power_w"] == pytest.approx(412.5) and r["mem_used_bytes"] == 40e9 for r in reads)
    assert all(r["gpu_util_pct"] == 97 and r["sm_clock_mhz"] == 1980 for r in reads)
    assert sampler.unavailable["temperature"] == "Not Supported"
    assert nvml.calls["nvmlDeviceGetTemperature"] == 3  # not retried after the drop


def test_a_transient_error_costs_one_reading_not_the_field() -> None:
    nvml = FakeNvml([FakeDevice("GPU-aaaa")])
    nvml.flaky["nvmlDeviceGetUtilizationRates"] = {2}
    sampler = open_sampler(nvml)
    reads = [sampler.read() for _ in range(3)]
    assert [("gpu_util_pct" in r) for r in reads] == [True, False, True]
    assert "utilization" not in sampler.unavailable


def test_a_field_failing_three_times_in_a_row_is_dropped() -> None:
    nvml = FakeNvml([FakeDevice("GPU-aaaa")])
    nvml.flaky["nvmlDeviceGetUtilizationRates"] = {1, 2, 3}
    sampler = open_sampler(nvml)
    reads = [sampler.read() for _ in range(5)]
    assert not any("gpu_util_pct" in r for r in reads)
    assert all(r["power_w"] == pytest.approx(412.5) for r in reads)
    assert sampler.unavailable["utilization"] == "Unknown Error"
    assert nvml.calls["nvmlDeviceGetUtilizationRates"] == 3


def test_throttle_reasons_fall_back_to_the_legacy_function() -> None:
    nvml = FakeNvml([FakeDevice("GPU-aaaa", reasons=0x40)])
    nvml.fail["nvmlDeviceGetCurrentClocksEventReasons"] = 0
    values = open_sampler(nvml).read()
    assert values["throttle_reasons"] == 0x40 and values["throttled"] == 1.0


def test_energy_is_the_counter_delta_since_open() -> None:
    device = FakeDevice("GPU-aaaa", power_instant_mw=300_000)
    nvml = FakeNvml([device])
    sampler = open_sampler(nvml)
    nvml.clock.now_s += 0.5
    assert sampler.read()["energy_j"] == pytest.approx(150.0)  # 300 W x 0.5 s
    device.power_instant_mw = 500_000
    nvml.clock.now_s += 0.5
    assert sampler.read()["energy_j"] == pytest.approx(400.0)  # + 500 W x 0.5 s


def test_energy_column_absent_when_counter_unsupported() -> None:
    nvml = FakeNvml([FakeDevice("GPU-aaaa")])
    nvml.fail["nvmlDeviceGetTotalEnergyConsumption"] = 0
    sampler = open_sampler(nvml)
    values = sampler.read()
    assert "energy_j" not in values and values["power_w"] == pytest.approx(412.5)
    assert sampler.unavailable["energy"] == "Not Supported"


def test_gpm_readings_difference_consecutive_samples() -> None:
    device = FakeDevice("GPU-aaaa")
    nvml = FakeNvml([device])
    sampler = open_sampler(nvml)
    nvml.clock.now_s += 0.2
    first = sampler.read()
    assert first["dram_bw_util_pct"] == pytest.approx(40.0)
    assert first["sm_util_pct"] == pytest.approx(90.0)
    assert first["sm_occupancy_pct"] == pytest.approx(30.0)
    assert first["tensor_util_pct"] == pytest.approx(55.0)
    device.gpm_pct[10] = 70.0
    nvml.clock.now_s += 0.2
    # Only the last 0.2 s count: the reader keeps the previous sample as reference.
    assert sampler.read()["dram_bw_util_pct"] == pytest.approx(70.0)


def test_gpm_reads_closer_than_100ms_carry_no_gpm_columns() -> None:
    device = FakeDevice("GPU-aaaa")
    nvml = FakeNvml([device])
    sampler = open_sampler(nvml)
    nvml.clock.now_s += 0.05
    early = sampler.read()
    assert "dram_bw_util_pct" not in early and early["power_w"] == pytest.approx(412.5)
    device.gpm_pct[10] = 80.0  # over the whole next 50 ms
    nvml.clock.now_s += 0.05
    # Differenced against the open() sample, 100 ms back: 50 ms at 40 % + 50 ms at 80 %.
    assert sampler.read()["dram_bw_util_pct"] == pytest.approx(60.0)
    assert nvml.calls["nvmlGpmMetricsGet"] == 1


def test_unsupported_gpm_leaves_the_other_fields() -> None:
    nvml = FakeNvml([FakeDevice("GPU-aaaa", gpm_supported=False)])
    sampler = open_sampler(nvml)
    nvml.clock.now_s += 0.2
    values = sampler.read()
    assert not set(GPM_METRICS) & set(values)
    assert values["mem_used_bytes"] == 40e9 and values["power_w"] == pytest.approx(412.5)
    assert sampler.unavailable["gpm"] == "GPM not supported on this device"
    assert nvml.calls["nvmlGpmSampleGet"] == 0


def test_one_failing_gpm_metric_is_dropped_alone() -> None:
    device = FakeDevice("GPU-aaaa", gpm_status={5: NOT_SUPPORTED})
    nvml = FakeNvml([device])
    sampler = open_sampler(nvml)
    for _ in range(2):
        nvml.clock.now_s += 0.2
        values = sampler.read()
        assert "tensor_util_pct" not in values
        assert values["dram_bw_util_pct"] == pytest.approx(40.0)
        assert values["sm_util_pct"] == pytest.approx(90.0)
    assert "tensor_util_pct" in sampler.unavailable


def test_one_nvml_call_per_field_per_read() -> None:
    nvml = FakeNvml([FakeDevice("GPU-aaaa")])
    sampler = open_sampler(nvml)
    nvml.clock.now_s += 0.2
    before = Counter(nvml.calls)
    sampler.read()
    per_read = nvml.calls - before
    assert max(per_read.values()) == 1
    # memory, utilization, power, 2 clocks, temperature, events, energy, GPM sample + metrics
    assert sum(per_read.values()) == len(FIELDS) + 1 + 2


def test_devices_are_mapped_by_uuid_in_cuda_order() -> None:
    devices = [
        FakeDevice("GPU-aaaa", power_instant_mw=100_000, mem_used_v2=1e9),
        FakeDevice("GPU-bbbb", power_instant_mw=200_000, mem_used_v2=2e9),
        FakeDevice("GPU-cccc", power_instant_mw=300_000, mem_used_v2=3e9, reasons=0x20),
    ]
    # As torch would report them under CUDA_VISIBLE_DEVICES=2,0: no prefix.
    values = open_sampler(FakeNvml(devices), cuda_uuids=["cccc", "AAAA"]).read()
    assert values["gpu0_power_w"] == pytest.approx(300.0)
    assert values["gpu1_power_w"] == pytest.approx(100.0)
    assert values["power_w"] == pytest.approx(400.0)
    assert values["mem_used_bytes"] == 4e9
    assert values["throttle_reasons"] == 0x20 and values["throttled"] == 1.0
    assert "gpu2_power_w" not in values


def test_device_indices_select_among_visible_devices() -> None:
    devices = [
        FakeDevice("GPU-aaaa", power_instant_mw=100_000),
        FakeDevice("GPU-bbbb", power_instant_mw=200_000),
    ]
    values = open_sampler(FakeNvml(devices), cuda_uuids=["aaaa", "bbbb"], device_indices=[1]).read()
    assert values["power_w"] == pytest.approx(200.0) and "gpu1_power_w" not in values
    with pytest.raises(ValueError, match=r"device_indices \[2\] out of range; valid: 0\.\.1"):
        open_sampler(FakeNvml(devices), cuda_uuids=["aaaa", "bbbb"], device_indices=[2])


@pytest.mark.parametrize("visible", ["1", "GPU-bbb", "1,7", "1,x,0"])
def test_cuda_visible_devices_used_when_torch_sees_no_cuda(monkeypatch, visible) -> None:
    devices = [
        FakeDevice("GPU-aaaa", power_instant_mw=100_000),
        FakeDevice("GPU-bbbb", power_instant_mw=200_000),
    ]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert open_sampler(FakeNvml(devices), cuda_uuids=None).read()["power_w"] == pytest.approx(
        200.0
    )


def test_no_visible_device_makes_nvml_unavailable(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    nvml = FakeNvml([FakeDevice("GPU-aaaa")])
    with pytest.raises(SamplerUnavailable, match="none of the CUDA devices"):
        open_sampler(nvml)
    assert nvml.initialized == 0  # shut down again


def test_mig_instance_is_found_by_its_own_uuid() -> None:
    nvml = FakeNvml([FakeDevice("GPU-aaaa", power_instant_mw=100_000)])
    nvml.mig_devices = [FakeDevice("MIG-ffff", power_instant_mw=50_000)]
    assert open_sampler(nvml, cuda_uuids=["ffff"]).read()["power_w"] == pytest.approx(50.0)


def test_enumeration_failure_makes_nvml_unavailable() -> None:
    nvml = FakeNvml([FakeDevice("GPU-aaaa")])
    nvml.fail["nvmlDeviceGetCount"] = 0
    with pytest.raises(SamplerUnavailable, match="enumeration failed: Not Supported"):
        open_sampler(nvml)
    assert nvml.initialized == 0


def test_uuid_normalization() -> None:
    assert normalize_uuid(b"GPU-AbC-1") == normalize_uuid("abc-1") == "abc-1"
    assert normalize_uuid("MIG-ff00") == "ff00"


def test_init_failure_makes_nvml_unavailable() -> None:
    with pytest.raises(SamplerUnavailable, match="nvmlInit failed"):
        open_sampler(FakeNvml([], init_error=True))


def test_close_frees_gpm_samples_and_shuts_nvml_down() -> None:
    nvml = FakeNvml([FakeDevice("GPU-aaaa")])
    sampler = open_sampler(nvml)
    gpm = sampler._devices[0].gpm
    samples = (gpm._previous, gpm._current)
    sampler.close()
    sampler.close()
    assert all(s.freed for s in samples) and nvml.initialized == 0


def open_real_nvml() -> NvmlSampler | SamplerUnavailable:
    sampler = NvmlSampler()
    try:
        sampler.open()
    except SamplerUnavailable as e:
        return e
    return sampler


def test_real_nvml_reads_the_device() -> None:
    sampler = open_real_nvml()
    if isinstance(sampler, SamplerUnavailable):
        pytest.skip(f"no NVIDIA device here: {sampler}")
    try:
        values = sampler.read()
    finally:
        sampler.close()
    totals = [v for k, v in values.items() if k.endswith("mem_total_bytes")]
    assert totals and all(v > 0 for v in totals), values
    masks = [int(v) for k, v in values.items() if k.endswith("throttle_reasons")]
    assert all(mask & ~pynvml.nvmlClocksEventReasonAll == 0 for mask in masks), masks


def test_without_a_driver_nvml_is_unavailable_with_the_reason() -> None:
    sampler = open_real_nvml()
    if not isinstance(sampler, SamplerUnavailable):
        sampler.close()
        pytest.skip("an NVIDIA driver is loaded here")
    assert "nvml" in str(sampler).lower() or "cuda" in str(sampler).lower()


def test_collector_with_fake_nvml_writes_energy_and_throttling(monkeypatch, tmp_path) -> None:
    device = FakeDevice("GPU-aaaa", power_instant_mw=250_000, reasons=0x4)
    nvml = FakeNvml([device], clock=time.perf_counter)
    nvml.fail["nvmlDeviceGetTemperature"] = 3
    monkeypatch.setitem(
        SAMPLERS, "nvml", lambda idx: NvmlSampler(idx, nvml=nvml, cuda_uuids=lambda: None)
    )
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    collector = Collector(interval_s=0.05, source="nvml")
    collector.start()
    time.sleep(0.4)
    samples = collector.stop()

    span_s = samples[-1].timestamp_s - samples[0].timestamp_s
    summary = collector.summarize()
    # The fake's counter integrates 250 W over the time between its first and last reads.
    assert summary["energy_j"] == pytest.approx(250.0 * span_s, rel=0.05)
    assert summary["telemetry_energy_source"] == "nvml_energy_counter"
    assert summary["telemetry_peak_power_w"] == pytest.approx(250.0)
    assert summary["throttled"] is True and summary["throttle_reasons"] == ["sw_power_cap"]
    assert summary["telemetry_source"] == "nvml+process"
    assert "nvml.temperature: Not Supported" in summary["telemetry_unavailable"]
    assert any("dram_bw_util_pct" in s.values for s in samples)
    assert nvml.initialized == 0
    collector.write_csv(tmp_path / "telemetry.csv")
    header = (tmp_path / "telemetry.csv").read_text().splitlines()[0].split(",")
    assert header[0] == "timestamp_s" and {"power_w", "energy_j", "rss_bytes"} <= set(header)


class CtypesGpmNvml(FakeNvml):
    """GPM through pynvml's own ctypes structs, to pin the field names the reader sets."""

    c_nvmlGpmMetricsGet_t = pynvml.c_nvmlGpmMetricsGet_t

    def nvmlGpmSampleAlloc(self):
        return pynvml.c_nvmlGpmSample_t()

    def nvmlGpmSampleGet(self, dev, sample):
        return sample

    def nvmlGpmMetricsGet(self, request):
        self.request = request
        for slot in range(request.numMetrics):
            request.metrics[slot].nvmlReturn = pynvml.NVML_SUCCESS
            request.metrics[slot].value = 10.0 * request.metrics[slot].metricId
        return request


def test_gpm_request_fills_the_real_pynvml_struct() -> None:
    nvml = CtypesGpmNvml([FakeDevice("GPU-aaaa")])
    sampler = open_sampler(nvml)
    nvml.clock.now_s += 0.1
    values = sampler.read()
    assert nvml.request.version == pynvml.NVML_GPM_METRICS_GET_VERSION
    assert nvml.request.numMetrics == len(GPM_METRICS)
    assert [nvml.request.metrics[i].metricId for i in range(4)] == [10, 2, 3, 5]
    assert values["dram_bw_util_pct"] == 100.0 and values["tensor_util_pct"] == 50.0
