"""summarize() and the per-device naming rule, on hand-built samples."""

from __future__ import annotations

import pytest

from llmperf.telemetry import Sample, summarize
from llmperf.telemetry.sample import merge_devices
from llmperf.telemetry.summary import run_energy_j
from llmperf.telemetry.throttle import is_throttled, reason_names

SAMPLES = [
    Sample(
        0.0, {"power_w": 100.0, "mem_used_bytes": 10.0, "energy_j": 0.0, "throttle_reasons": 0.0}
    ),
    Sample(
        0.5, {"power_w": 300.0, "mem_used_bytes": 30.0, "energy_j": 110.0, "throttle_reasons": 4.0}
    ),
    Sample(
        1.0, {"power_w": 200.0, "mem_used_bytes": 20.0, "energy_j": 240.0, "throttle_reasons": 1.0}
    ),
    Sample(1.5, {"power_w": 400.0, "energy_j": 390.0, "throttle_reasons": 0x44}),
]


def test_peak_and_mean_of_each_gauge_column() -> None:
    summary = summarize(SAMPLES)
    assert summary["telemetry_num_samples"] == 4
    assert summary["telemetry_peak_power_w"] == 400.0
    assert summary["telemetry_mean_power_w"] == 250.0  # (100 + 300 + 200 + 400) / 4
    assert summary["telemetry_peak_mem_used_bytes"] == 30.0
    assert summary["telemetry_mean_mem_used_bytes"] == 20.0  # the sample without it is skipped
    # A counter and a bitmask have no meaningful peak or mean.
    assert not any(
        k.startswith("telemetry_") and k.endswith(("energy_j", "throttle_reasons")) for k in summary
    )


def test_energy_is_the_counter_delta_when_the_counter_is_there() -> None:
    summary = summarize(SAMPLES)
    assert summary["energy_j"] == 390.0
    assert summary["telemetry_energy_source"] == "nvml_energy_counter"


def test_energy_integrates_power_without_a_counter() -> None:
    samples = [Sample(s.timestamp_s, {"power_w": s.values["power_w"]}) for s in SAMPLES]
    summary = summarize(samples)
    # Trapezoids: 0.5 * (100+300)/2 + 0.5 * (300+200)/2 + 0.5 * (200+400)/2 = 100 + 125 + 150
    assert summary["energy_j"] == pytest.approx(375.0)
    assert summary["telemetry_energy_source"] == "integrated_power"


def test_energy_is_none_when_nothing_measures_power() -> None:
    summary = summarize([Sample(0.0, {"rss_bytes": 1.0}), Sample(1.0, {"rss_bytes": 2.0})])
    assert summary["energy_j"] is None and summary["telemetry_energy_source"] is None
    assert summary["throttled"] is None and summary["telemetry_throttled_fraction"] is None


def test_throttling_names_only_limit_reasons() -> None:
    summary = summarize(SAMPLES)
    # 0x4 sw_power_cap and 0x44 (+ hw_thermal_slowdown) throttle; 0x1 gpu_idle does not.
    assert summary["throttled"] is True
    assert summary["throttle_reasons"] == ["sw_power_cap", "hw_thermal_slowdown"]
    assert summary["telemetry_throttled_fraction"] == 0.5


def test_window_limits_every_figure() -> None:
    summary = summarize(SAMPLES, start_s=0.5, end_s=1.0)
    assert summary["telemetry_num_samples"] == 2
    assert summary["telemetry_mean_power_w"] == 250.0
    assert summary["energy_j"] == 130.0  # 240 - 110
    assert summary["throttle_reasons"] == ["sw_power_cap"]


RAMP = [Sample(float(t), {"power_w": 100.0 * t}) for t in range(5)]  # 100 W/s ramp from 0 s
COUNTER = [Sample(float(t), {"energy_j": 50.0 * t * t}) for t in range(5)]  # its integral


def test_energy_covers_the_window_exactly_between_samples() -> None:
    # The integral of 100 t over [0.5, 3.5]: 50 x (3.5^2 - 0.5^2) = 600 J, not the
    # 400 J of the samples inside the window (1 s to 3 s).
    assert run_energy_j(RAMP, 0.5, 3.5) == (pytest.approx(600.0), "integrated_power")
    assert summarize(RAMP, 0.5, 3.5)["energy_j"] == pytest.approx(600.0)
    # The counter read at the edges, linear between samples: 625 - 25.
    assert run_energy_j(COUNTER, 0.5, 3.5) == (pytest.approx(600.0), "nvml_energy_counter")


def test_energy_beyond_the_samples_holds_the_edge_power_or_counter_rate() -> None:
    flat = [Sample(float(t), {"power_w": 200.0, "energy_j": 200.0 * t}) for t in range(1, 4)]
    assert run_energy_j(flat, 0.0, 5.0) == (pytest.approx(1000.0), "nvml_energy_counter")
    power_only = [Sample(s.timestamp_s, {"power_w": 200.0}) for s in flat]
    assert run_energy_j(power_only, 0.0, 5.0) == (pytest.approx(1000.0), "integrated_power")
    assert run_energy_j(power_only, 2.0, 2.0) == (0.0, "integrated_power")


def test_one_device_keeps_plain_names() -> None:
    assert merge_devices({3: {"power_w": 5.0}}) == {"power_w": 5.0}


def test_several_devices_are_prefixed_and_additive_columns_summed() -> None:
    merged = merge_devices(
        {
            0: {"power_w": 100.0, "gpu_util_pct": 50.0, "throttle_reasons": 4.0, "throttled": 1.0},
            1: {"power_w": 250.0, "gpu_util_pct": 70.0, "throttle_reasons": 0x40, "throttled": 1.0},
        }
    )
    assert merged == {
        "gpu0_power_w": 100.0,
        "gpu0_gpu_util_pct": 50.0,
        "gpu0_throttle_reasons": 4.0,
        "gpu0_throttled": 1.0,
        "gpu1_power_w": 250.0,
        "gpu1_gpu_util_pct": 70.0,
        "gpu1_throttle_reasons": 0x40,
        "gpu1_throttled": 1.0,
        "power_w": 350.0,
        "throttle_reasons": 0x44,
        "throttled": 1.0,
    }


def test_a_total_is_left_out_when_a_device_lacks_the_column() -> None:
    merged = merge_devices({0: {"power_w": 100.0}, 1: {}})
    assert merged == {"gpu0_power_w": 100.0}


def test_reason_decoding() -> None:
    assert reason_names(0x1 | 0x4 | 0x80) == ["gpu_idle", "sw_power_cap", "hw_power_brake_slowdown"]
    assert not is_throttled(0x1 | 0x2 | 0x10 | 0x100)
    assert all(is_throttled(bit) for bit in (0x4, 0x8, 0x20, 0x40, 0x80))


def test_bits_nvml_does_not_define_are_named_by_value_and_are_not_throttling() -> None:
    assert reason_names(0x4 | 0x200 | 0x400) == ["sw_power_cap", "unknown_0x200", "unknown_0x400"]
    assert not is_throttled(0x200) and not is_throttled(0x400)
