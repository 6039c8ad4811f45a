import pytest

from llmperf.report.units import MISSING, duration, format_value, significant


@pytest.mark.parametrize(("key", "value", "text"), [
    ("output_throughput_tps", 322.718, "323 tok/s"),
    ("request_throughput_rps", 4.4421, "4.44 req/s"),
    ("duration_s", 9.0047, "9.00 s"),
    ("run_cost_usd", 0.00991, "$0.00991"),
    ("usd_per_1m_tokens", 0.6049, "$0.605"),
    ("mem_used_bytes", 3 * 2**30, "3.00 GiB"),
    ("rss_bytes", 512 * 2**20, "512 MiB"),
    ("achieved_bw_decode_bytes_per_s", 2.9e12, "2.90 TB/s"),
    ("achieved_flops_decode_per_s", 21e12, "21.0 TFLOP/s"),
    ("mbu_decode", 0.6041, "60.4 %"),
    ("slo_attainment", 1.0, "100 %"),
    ("telemetry_peak_power_w", 655.0, "655 W"),
    ("telemetry_mean_dram_bw_util_pct", 52.0, "52.0 %"),
    ("energy_per_output_token_j", 1.3763, "1.38 J"),
    ("num_requests", 1200, "1,200"),
    ("throttled", False, "no"),
    ("throttle_reasons", ["sw_power_cap", "hw_slowdown"], "sw_power_cap, hw_slowdown"),
    ("roofline_source", "steps", "steps"),
    ("goodput_rps", None, MISSING),
])
def test_format_value_gives_each_summary_key_its_unit(key, value, text):
    assert format_value(key, value) == text


def test_durations_pick_the_scale_that_keeps_one_to_a_thousand():
    assert duration(0.0226) == "22.6 ms"
    assert duration(4.2e-5) == "42.0 µs"
    assert duration(125.0) == "125 s"


def test_significant_keeps_three_figures_and_no_absurd_decimals():
    assert significant(1234.6) == "1,235"
    assert significant(0.012345) == "0.0123"
    assert significant(2.74e-13) == "2.74e-13"  # float noise stays visible as noise
    assert significant(0) == "0"
