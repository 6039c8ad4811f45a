"""The A/A spread of a baseline's own repeats and the tolerances sized from it
(llmperf/gate/spread.py, `llmperf-gate --update --ci-repeats K --size-tolerances`)."""

from __future__ import annotations

import json

import pytest

from llmperf.gate.metric_spec import Tolerance
from llmperf.gate.spread import aa_spread
from tests.test_gate_cli import currents, gate
from tests.test_gate_support import summary, write_run


def test_the_spread_is_the_largest_move_of_k_repeats_against_the_rest():
    # K = 2 of [1..5]: {4, 5} -> median 4.5 against median(1, 2, 3) = 2: +125%, the largest;
    # {1, 2} -> 1.5 against 4 is -62.5%.
    spread = aa_spread([1.0, 2.0, 3.0, 4.0, 5.0], 2, relative=True)
    assert spread.largest == pytest.approx(1.25) and spread.splits == 10
    assert aa_spread([1.0, 2.0, 3.0, 4.0, 5.0], 2, relative=False).largest == pytest.approx(2.5)
    # K = 3 of 5: {3, 4, 5} -> 4 against median(1, 2) = 1.5: +166.7%
    assert aa_spread([5.0, 1.0, 4.0, 2.0, 3.0], 3, relative=True).largest == pytest.approx(4 / 1.5 - 1)
    # identical repeats do not move at all
    assert aa_spread([7.0] * 6, 3, relative=True).largest == 0.0


def test_too_few_repeats_have_no_spread():
    assert aa_spread([1.0, 2.0, 3.0], 2, relative=True) is None  # the rest would be one repeat
    assert aa_spread([1.0, 2.0, 3.0, 4.0], 2, relative=True) is not None
    assert aa_spread([0.0, 0.0, 1.0, 1.0], 2, relative=True) is None  # no relative change of 0


def test_a_tolerance_is_widened_to_twice_the_spread_and_never_narrowed():
    spread = aa_spread([100.0, 100.0, 110.0, 100.0, 90.0], 2, relative=True)
    assert spread.largest == pytest.approx(0.05)  # {100, 110} -> 105 against 100
    assert spread.sized(Tolerance(0.05, True)) == Tolerance(0.10, True)
    assert spread.sized(Tolerance(0.25, True)) == Tolerance(0.25, True)
    # 2 x 6.2% = 12.4% rounds up to the next whole 5%
    assert aa_spread([1.0, 1.0, 1.062, 1.062, 1.0], 2, True).sized(Tolerance(0.05, True)) == \
        Tolerance(0.15, True)
    # absolute: 2 x 0.0234 = 0.0468 -> two significant digits, rounded up: 0.047
    absolute = aa_spread([0.5, 0.5, 0.5234, 0.5234, 0.5], 2, relative=False)
    assert absolute.sized(Tolerance(0.02, False)).amount == pytest.approx(0.047)


def write_repeats(tmp_path, values):
    return [write_run(tmp_path / f"r{i}", summary(v, git_commit="abc123"))
            for i, v in enumerate(values)]


def test_update_warns_where_a_tolerance_is_under_twice_the_spread(tmp_path, capsys):
    runs = write_repeats(tmp_path, [100.0, 100.0, 110.0, 100.0, 90.0])
    baseline = tmp_path / "b.json"
    assert gate("--baseline", baseline, *currents(runs), "--update",
                "--metric", "output_throughput_tps:-8%", "--metric", "ttft_s.p99:+50%") == 0
    out = capsys.readouterr().out
    assert ("warning: output_throughput_tps: with no change, a median of 2 of these repeats moved"
            " 5.0% against the others' (10 splits); its tolerance -8% is under twice that") in out
    assert "widen it to -10%" in out
    assert "ttft_s.p99:" not in out  # its latency follows the throughput here, and 50% covers it
    assert json.loads(baseline.read_text())["metrics"]["output_throughput_tps"]["tolerance"] == "-8%"


def test_size_tolerances_writes_the_widened_tolerance(tmp_path, capsys):
    runs = write_repeats(tmp_path, [100.0, 100.0, 110.0, 100.0, 90.0, 104.0])
    baseline = tmp_path / "b.json"
    assert gate("--baseline", baseline, *currents(runs), "--update", "--ci-repeats", "3",
                "--size-tolerances", "--metric", "output_throughput_tps:-5%") == 0
    # K = 3 of 6: {100, 110, 104} -> 104 against median(100, 100, 90) = 100: +4%, the largest
    # ({90, 100, 100} -> 100 against 104 is -3.8%): twice 4% is 8%, rounded up to 10%
    out = capsys.readouterr().out
    assert ("sized: output_throughput_tps: tolerance -5% widened to -10%, twice its A/A spread"
            " at 3 repeats (4.0%)") in out
    assert json.loads(baseline.read_text())["metrics"]["output_throughput_tps"]["tolerance"] == "-10%"
    assert gate("--baseline", baseline, *currents(runs[:3])) == 0
