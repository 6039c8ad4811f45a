"""report.percentiles: which percentiles every distribution carries, named the same in the
summary, the console, the report and the gate (50 is `median`, 99.9 is `p99.9`)."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pytest
from rich.console import Console

from llmperf.errors import ConfigError
from llmperf.gate.metric_spec import MetricSpec
from llmperf.gate.runs import GateError, evaluate, load_jobs
from llmperf.measure.catalog import STAT_KEYS, find, percentile_key, split_statistic, stat_keys
from llmperf.measure.metrics import distribution, percentiles_in_use, ttft_s
from llmperf.measure.records import RequestRecord
from llmperf.run.config import ReportConfig


def test_the_default_set_is_the_one_baselines_were_written_with():
    assert STAT_KEYS == ("mean", "median", "p90", "p95", "p99", "std", "min", "max")
    assert tuple(distribution([1.0, 2.0, 3.0])) == STAT_KEYS
    assert ReportConfig().percentiles == [50.0, 90.0, 95.0, 99.0]


def test_a_percentile_is_named_p_and_its_value():
    assert [percentile_key(q) for q in (50, 90, 99, 99.9, 99.99, 12.5)] == [
        "median", "p90", "p99", "p99.9", "p99.99", "p12.5"]
    assert stat_keys([99.9, 50, 99]) == ("mean", "median", "p99", "p99.9", "std", "min", "max")
    assert split_statistic("ttft_s.p99.9") == ("ttft_s", "p99.9")
    assert find("ttft_s.p99.9").label == "TTFT p99.9"
    spec = MetricSpec.parse("ttft_s.p99.9@stage=1")
    assert (spec.base, spec.stage, spec.job) == ("ttft_s.p99.9", 1, None)


def test_distribution_gives_the_percentiles_in_use_by_linear_interpolation():
    values = [float(v) for v in range(1, 1001)]  # 1..1000: the q-th percentile is 1 + q/100 x 999
    with percentiles_in_use([50, 90, 95, 99, 99.9]):
        stats = distribution(values)
    assert list(stats) == ["mean", "median", "p90", "p95", "p99", "p99.9", "std", "min", "max"]
    assert stats["median"] == pytest.approx(500.5)
    assert stats["p90"] == pytest.approx(900.1)
    assert stats["p99"] == pytest.approx(990.01)
    assert stats["p99.9"] == pytest.approx(999.001)
    assert stats["mean"] == 500.5 and stats["min"] == 1.0 and stats["max"] == 1000.0
    assert distribution([1.0]) == {**dict.fromkeys(STAT_KEYS, 1.0), "std": 0.0}  # set back
    with percentiles_in_use([75]):
        assert distribution([]) == {"mean": None, "p75": None, "std": None, "min": None, "max": None}


@pytest.mark.parametrize("bad", [[50, 100], [0], []])
def test_a_percentile_outside_0_100_is_refused(bad):
    with pytest.raises(ConfigError, match="percentiles"):
        ReportConfig(percentiles=bad)


def test_a_bad_percentile_on_the_command_line_is_one_line_and_exit_2():
    done = subprocess.run([sys.executable, "-m", "llmperf", "engine=synthetic",
                           "report.percentiles=[50,100]"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "report.percentiles" in done.stderr
    assert "100 is not in (0, 100)" in done.stderr


def test_a_run_carries_its_percentiles_everywhere(tmp_path):
    from llmperf.run.runner import run_benchmark
    from tests.conftest import compose_overrides

    overrides = ["engine=synthetic", "engine.ttft_s=0.002", "engine.tpot_s=0.0005",
                 "engine.jitter=0.5", "scenario.prompt_tokens.dist=fixed",
                 "scenario.prompt_tokens.value=8", "scenario.output_tokens.dist=fixed",
                 "scenario.output_tokens.value=4", "scenario.num_requests=60",
                 "scenario.arrival.process=constant", "scenario.arrival.rate_rps=100",
                 "hardware=cpu", "telemetry.enabled=false", "report.percentiles=[50,90,99,99.9]"]
    out = io.StringIO()
    run_benchmark(compose_overrides(*overrides), tmp_path, argv=overrides,
                  console=Console(file=out, width=200))
    summary = json.loads((tmp_path / "summary.json").read_text())
    records = [RequestRecord.from_dict(json.loads(line))
               for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    ttfts = [ttft_s(r) for r in records if not r.warmup]
    assert list(summary["ttft_s"]) == ["mean", "median", "p90", "p99", "p99.9", "std", "min", "max"]
    assert summary["ttft_s"]["p99.9"] == pytest.approx(np.percentile(ttfts, 99.9))
    assert "p95" not in summary["e2e_s"] and "p99.9" in summary["client_delay_s"]

    console = out.getvalue()
    header = next(line for line in console.splitlines() if "latency (ms)" in line)
    assert header.split("┃")[1:] and [c.strip() for c in header.split("┃")] == [
        "latency (ms)", "mean", "p50", "p90", "p99", "p99.9", "max"]

    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert '<th class="num">p99.9</th>' in html and '<th class="num">p95</th>' not in html

    jobs = load_jobs(tmp_path)
    value = evaluate(MetricSpec.parse("ttft_s.p99.9"), jobs, tmp_path)
    assert value == summary["ttft_s"]["p99.9"]
    with pytest.raises(GateError, match="percentile its report.percentiles did not hold"):
        evaluate(MetricSpec.parse("ttft_s.p95"), jobs, tmp_path)
