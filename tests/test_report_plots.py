"""Every plot has a title, axis labels with units and a legend where it draws several
series; plots a folder cannot feed say why instead of failing."""

import re

import pytest
from matplotlib.category import StrCategoryFormatter

from llmperf.report import run_plots, sweep_plots
from llmperf.report.folder import load_run_folder
from llmperf.report.plotting import NoData
from llmperf.report.sweep import load_sweep
from tests.test_report_support import H200, write_realistic_run, write_realistic_sweep

UNIT = re.compile(r"\(.+\)")


def assert_labelled(fig):
    assert fig.get_suptitle(), "figure without a title"
    for ax in fig.axes:
        assert ax.get_title(loc="left") or ax.get_title(), "panel without a title"
        assert UNIT.search(ax.get_ylabel()), f"y label without a unit: {ax.get_ylabel()!r}"
        categorical = isinstance(ax.xaxis.get_major_formatter(), StrCategoryFormatter)
        shared = ax.get_shared_x_axes().get_siblings(ax)
        assert categorical or any(UNIT.search(a.get_xlabel()) for a in shared), \
            f"x axis without a unit: {ax.get_title(loc='left')!r}"
        labels = ax.get_legend_handles_labels()[1]
        if len(labels) > 1:
            assert ax.get_legend() is not None, f"{len(labels)} series and no legend: {labels}"


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    return load_run_folder(write_realistic_run(tmp_path_factory.mktemp("run") / "run"))


@pytest.mark.parametrize(("name", "make"), [(n, m) for n, _, m in run_plots.RUN_PLOTS])
def test_every_run_plot_is_titled_labelled_with_units_and_has_its_legend(full_run, name, make):
    assert_labelled(make(full_run))


def test_sweep_plots_are_titled_labelled_with_units_and_have_legends(tmp_path):
    sweep = load_sweep(write_realistic_sweep(tmp_path / "sweep"))
    for _, _, make in sweep_plots.SWEEP_PLOTS:
        assert_labelled(make(sweep))


def test_plots_without_their_data_say_what_is_missing(tmp_path):
    run = load_run_folder(write_realistic_run(tmp_path / "run", steps=False, telemetry=False))
    with pytest.raises(NoData, match="no steps.jsonl"):
        run_plots.engine_steps(run)
    with pytest.raises(NoData, match="no telemetry.csv"):
        run_plots.telemetry(run)
    for key in [k for k in run.summary if k.startswith(("achieved_", "roofline_"))]:
        del run.summary[key]
    with pytest.raises(NoData, match="no roofline figures"):
        run_plots.roofline(run)


def test_roofline_points_are_achieved_flops_over_bytes():
    summary = {"achieved_flops_decode_per_s": 21e12, "achieved_bw_decode_bytes_per_s": 3e12,
               "achieved_flops_prefill_per_s": 400e12, "achieved_bw_prefill_bytes_per_s": 1e12}
    assert run_plots.roofline_points(summary) == [("prefill", 400.0, 400e12),
                                                  ("decode", 7.0, 21e12)]


@pytest.mark.parametrize("dtype", ["bfloat16", "torch.bfloat16", "bf16"])
def test_roofline_draws_its_ceilings_whatever_the_dtype_is_called(full_run, dtype):
    """Engines report torch's names (`bfloat16`); profiles key FLOP/s by `bf16`."""
    summary = {**full_run.summary, "roofline_compute_dtype": dtype}
    assert [c[0] for c in run_plots._ceilings(summary)] == ["datasheet", "measured"]
    full_run.summary["roofline_compute_dtype"] = dtype
    fig = run_plots.roofline(full_run)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert any(label.startswith("ceiling (datasheet): 4800 GB/s, 989.4 TFLOP/s")
               for label in labels), labels


def test_roofline_falls_back_to_tokens_against_ceiling_without_peaks(full_run):
    full_run.summary["hardware"] = {**H200, "peak_flops": {}, "measured_flops": {}}
    fig = run_plots.roofline(full_run)
    assert len(fig.axes) == 1
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert heights == pytest.approx([full_run.summary["output_throughput_tps"],
                                     full_run.summary["roofline_output_tps"]])


def test_telemetry_draws_per_device_columns_only_without_a_total():
    columns = ["timestamp_s", "power_w", "gpu0_power_w", "gpu1_power_w", "gpu0_sm_util_pct",
               "gpu1_sm_util_pct", "rss_bytes"]
    assert run_plots.telemetry_columns(columns, "_w") == ["power_w"]
    assert run_plots.telemetry_columns(columns, "_pct") == ["gpu0_sm_util_pct",
                                                            "gpu1_sm_util_pct"]


def test_engine_steps_panel_counts_preemptions(tmp_path):
    run = load_run_folder(write_realistic_run(tmp_path / "run", telemetry=False))
    for step in run.steps[::100]:
        step["preemptions"] = 2
    fig = run_plots.engine_steps(run)
    assert fig.axes[-1].get_title(loc="left") == f"preemptions: {2 * len(run.steps[::100])} in all"
    assert fig.axes[-1].get_lines()[0].get_ydata()[-1] == 2 * len(run.steps[::100])


def test_load_curves_need_a_numeric_override_that_varies(tmp_path):
    sweep = load_sweep(write_realistic_sweep(tmp_path / "sweep"))
    sweep.group_keys, sweep.x_key = ["engine.batching", "scenario.arrival.rate_rps"], None
    with pytest.raises(NoData, match="no numeric override varies"):
        sweep_plots.load_curves(sweep)


def test_prediction_plot_puts_each_job_at_measured_against_predicted(tmp_path):
    sweep = load_sweep(write_realistic_sweep(tmp_path / "sweep"))
    fig = sweep_plots.prediction(sweep)
    ttft_ax = fig.axes[0]
    points = [p for c in ttft_ax.collections for p in c.get_offsets().tolist()]
    expected = sorted([t * 1e3, p * 1e3] for t, p in zip(sweep.table["ttft_median_s"], sweep.table["predicted_ttft_s"], strict=True))
    assert [x for p in sorted(points) for x in p] == pytest.approx([x for p in expected for x in p])
    for job in ("ttft_median_s", "predicted_ttft_s"):
        sweep.table[job] = None
    sweep.table["predicted_decode_step_s"] = None
    with pytest.raises(NoData, match="no job has roofline predictions"):
        sweep_plots.prediction(sweep)
