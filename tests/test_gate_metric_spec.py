import pytest

from llmperf.gate.errors import GateError
from llmperf.gate.metric_spec import MetricSpec, Tolerance, direction_of, parse_metric_arg
from llmperf.measure.catalog import HIGHER, LOWER


@pytest.mark.parametrize("name, direction", [
    ("output_throughput_tps", HIGHER), ("goodput_rps", HIGHER), ("mbu_decode", HIGHER),
    ("slo_attainment", HIGHER), ("steps.tokens_per_step", HIGHER),
    ("ttft_s.p99", LOWER), ("itl_s.median", LOWER), ("dispatch_lag_s.max", LOWER),
    ("usd_per_1m_tokens", LOWER), ("steps.padded_fraction", LOWER), ("steps.count", LOWER),
])
def test_known_metrics_have_their_direction(name, direction):
    assert direction_of(name) == direction


@pytest.mark.parametrize("name", ["ttft_p99", "ttft_s.p100", "ttft_s.p99.", "ttft_s", "steps.speed",
                                  "tokens"])
def test_unknown_metric_names_the_valid_ones(name):
    with pytest.raises(GateError) as e:
        MetricSpec.parse(name)
    text = str(e.value)
    assert f"unknown metric {name!r}" in text
    assert "output_throughput_tps" in text and "steps.padded_fraction" in text
    assert "{ttft_s,tpot_s,itl_s,e2e_s,queue_s,dispatch_lag_s}.{mean,median,p90,p95,p99,std,min,max,p<q> of report.percentiles}" in text
    assert "\n" not in text


def test_unknown_metric_suggests_the_closest_name():
    with pytest.raises(GateError, match=r"did you mean 'ttft_s.p99'"):
        MetricSpec.parse("ttft_p99")


def test_ratio_metric_parses_both_job_selectors():
    spec = MetricSpec.parse(
        "output_throughput_tps@engine.batching=continuous,scenario.arrival.rate_rps=2"
        "/engine.batching=static,scenario.arrival.rate_rps=2")
    assert spec.base == "output_throughput_tps"
    assert spec.direction == HIGHER
    assert spec.job == (("engine.batching", "continuous"), ("scenario.arrival.rate_rps", "2"))
    assert spec.over_job == (("engine.batching", "static"), ("scenario.arrival.rate_rps", "2"))


def test_job_selector_drops_hydra_plus_prefix():
    assert MetricSpec.parse("ttft_s.p99@+engine.x=1").job == (("engine.x", "1"),)


@pytest.mark.parametrize("name, message", [
    ("output_throughput_tps@engine.batching", "malformed job selector"),
    ("output_throughput_tps@=static", "malformed job selector"),
    ("output_throughput_tps@a=1/b=2/c=3", "more than one '/'"),
])
def test_malformed_selectors_are_usage_errors(name, message):
    with pytest.raises(GateError, match=message):
        MetricSpec.parse(name)


@pytest.mark.parametrize("text, amount, relative", [
    ("-5%", 0.05, True), ("5%", 0.05, True), ("-12.5%", 0.125, True), ("0%", 0.0, True),
    ("-3", 3.0, False), (".5", 0.5, False),
])
def test_tolerance_of_a_higher_is_better_metric(text, amount, relative):
    tol = Tolerance.parse(text, MetricSpec.parse("output_throughput_tps"))
    assert tol.amount == pytest.approx(amount)
    assert tol.relative is relative


def test_tolerance_text_is_signed_the_way_a_regression_moves():
    throughput = MetricSpec.parse("output_throughput_tps")
    latency = MetricSpec.parse("ttft_s.p99")
    assert Tolerance.parse("5%", throughput).text(throughput.direction) == "-5%"
    assert Tolerance.parse("10%", latency).text(latency.direction) == "+10%"
    padded = MetricSpec.parse("steps.padded_fraction")
    assert Tolerance.parse("+0.02", padded).text(padded.direction) == "+0.02"


@pytest.mark.parametrize("metric, text, message", [
    ("output_throughput_tps", "+5%", "points the wrong way.*write -5%"),
    ("ttft_s.p99", "-10%", "points the wrong way.*write \\+10%"),
    ("ttft_s.p99", "ten", "malformed tolerance 'ten'"),
    ("ttft_s.p99", "5%%", "malformed tolerance"),
    ("ttft_s.p99", "", "malformed tolerance"),
    ("ttft_s.p99", "1e-2", "malformed tolerance"),
])
def test_bad_tolerances_are_usage_errors(metric, text, message):
    with pytest.raises(GateError, match=message):
        Tolerance.parse(text, MetricSpec.parse(metric))


def test_metric_argument_takes_the_tolerance_after_the_last_colon():
    spec, tol = parse_metric_arg(
        "output_throughput_tps@engine.batching=continuous/engine.batching=static:-10%")
    assert spec.over_job == (("engine.batching", "static"),)
    assert tol == Tolerance(0.10, relative=True)
    spec, tol = parse_metric_arg("ttft_s.p99")
    assert spec.name == "ttft_s.p99" and tol is None
    with pytest.raises(GateError, match="malformed tolerance"):
        parse_metric_arg("ttft_s.p99:")
