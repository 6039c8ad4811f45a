"""The pages' structure without a browser: sections, banners, escaping, and every image a
PNG file beside the page (test_report_browser.py renders the same pages in Chromium)."""

import json
import struct
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from llmperf.report.compare import build_comparison_report
from llmperf.report.run import build_run_report
from llmperf.report.sweep import build_sweep_report
from llmperf.report.units import duration
from tests.test_report_support import write_realistic_run, write_realistic_sweep

SCRIPT = "<script>alert(1)</script>"


class Page(HTMLParser):
    def __init__(self, html: str) -> None:
        super().__init__()
        self.images: list[str] = []
        self.links: list[str] = []
        self.tags: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs["src"])
        if tag in ("a", "link"):
            self.links.append(attrs.get("href", ""))


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def check_self_contained(report: Path, min_images: int) -> tuple[str, Page]:
    html = report.read_text(encoding="utf-8")
    page = Page(html)
    assert "script" not in page.tags  # no script at all: nothing to run, nothing to fetch
    assert len(page.images) >= min_images
    for src in page.images:
        assert not src.startswith(("http:", "https:", "//")), src
        width, height = png_size(report.parent / src)
        assert width >= 800 and height >= 300
    assert not any(link.startswith(("http:", "https:", "//")) for link in page.links)
    return html, page


@pytest.fixture(scope="module")
def run_report(tmp_path_factory):
    folder = write_realistic_run(tmp_path_factory.mktemp("run") / "run",
                                 config_extra=f"note: \"{SCRIPT}\"\n",
                                 overrides=[f"scenario.dataset={SCRIPT}"])
    return build_run_report(folder)


def test_run_report_shows_figures_first_then_plots_config_and_environment(run_report):
    html, page = check_self_contained(run_report, min_images=7)
    order = [html.index(s) for s in ('class="banner ok"', 'class="tiles"', "Latency (ms)",
                                     "<h2>Plots</h2>", "<h2>Validity</h2>",
                                     "<h2>Configuration</h2>", "<h2>Environment</h2>")]
    assert order == sorted(order)
    assert "Valid: all 3 validity checks passed" in html
    assert "tok/s" in html and "req/s" in html
    for name in ("latency_cdf", "latency_over_time", "itl_histogram", "throughput_over_time",
                 "engine_steps", "telemetry", "roofline"):
        assert f"plots/{name}.png" in page.images
    assert "git.commit" in html and "8c234bb" in html


def test_run_report_states_the_window_cost_and_energy_cover(run_report):
    html = run_report.read_text(encoding="utf-8")
    summary = json.loads((run_report.parent / "summary.json").read_text())
    start, end = summary["window_start_s"], summary["window_end_s"]
    text = (f"measured window, {duration(start)} to {duration(end)} ({duration(end - start)}):"
            " cost and energy both")
    assert text in html
    assert f"over the {duration(summary['duration_s'])} measured window" in html


def test_config_values_and_overrides_are_escaped(run_report):
    html = run_report.read_text(encoding="utf-8")
    assert SCRIPT not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # shown, as text, in config and overrides
    assert html.count("&lt;script&gt;") >= 2


def test_interrupted_run_still_builds_and_says_it_is_partial(tmp_path):
    report = build_run_report(write_realistic_run(tmp_path / "run", interrupted=True))
    html, _ = check_self_contained(report, min_images=5)
    assert "PARTIAL RUN: interrupted before the end" in html
    assert "NOT VALID" in html and "not_interrupted: interrupted by SIGINT" in html
    assert 'class="banner ok"' not in html


def test_run_killed_before_its_summary_gets_a_report_from_its_records(tmp_path):
    folder = write_realistic_run(tmp_path / "run", summary=False, interrupted=True, steps=False,
                                 telemetry=False)
    html, page = check_self_contained(build_run_report(folder), min_images=4)
    assert "PARTIAL RUN: it ended before writing summary.json" in html
    assert "chat · reference (continuous) · llama-3.2-1b · h200" in html  # from config.yaml
    assert "computed from requests.jsonl" in html
    assert "Engine steps" in html and "not drawn, no steps.jsonl" in html
    assert "Missing: <code>summary.json</code>" in html


def test_rebuilding_leaves_no_stale_plot(tmp_path):
    folder = write_realistic_run(tmp_path / "run", steps=False)
    build_run_report(folder)
    assert (folder / "plots" / "telemetry.png").exists()
    (folder / "telemetry.csv").unlink()
    build_run_report(folder)
    assert not (folder / "plots" / "telemetry.png").exists()
    assert (folder / "plots" / "roofline.png").exists()


def test_sweep_report_compares_every_job_side_by_side(tmp_path):
    sweep = write_realistic_sweep(tmp_path / "sweep")
    for job in sorted(sweep.iterdir())[:1]:
        if job.is_dir():
            build_run_report(job)
    html, page = check_self_contained(build_sweep_report(sweep), min_images=3)
    assert html.count("<tr") - html.count('<tr><th') >= 4 + 2 * 4  # 4 jobs, 4 pivots of 2 rows
    assert "Output throughput (tok/s)" in html and "TTFT p99 (ms)" in html
    assert "batching=continuous" in html and "batching=static" in html
    linked = [link for link in page.links if link.endswith("report.html")]
    assert len(linked) == 1  # only the job whose report exists is linked
    assert (sweep / linked[0]).is_file()


def test_sweep_labels_are_escaped(tmp_path):
    sweep = write_realistic_sweep(tmp_path / "sweep")
    job = next(p for p in sweep.iterdir() if p.is_dir())
    (job / ".hydra" / "overrides.yaml").write_text(
        f"- engine.batching='{SCRIPT}'\n- scenario.arrival.rate_rps=4\n")
    html = build_sweep_report(sweep).read_text(encoding="utf-8")
    assert SCRIPT not in html and "&lt;script&gt;" in html


def test_comparison_page_puts_runs_side_by_side(tmp_path):
    a = write_realistic_run(tmp_path / "a", overrides=["engine.batching=continuous"])
    b = write_realistic_run(tmp_path / "b", max_batch=2, overrides=["engine.batching=static"],
                            config_extra="engine_extra: 1\n")
    report = build_comparison_report([a, b], tmp_path / "out")
    html, _ = check_self_contained(report, min_images=2)
    assert "1: engine.batching=continuous" in html and "2: engine.batching=static" in html
    assert "engine_extra" in html  # the config key that differs


def test_reports_never_touch_pyplot(tmp_path):
    """Figures go through the Agg canvas directly: no pyplot, no global backend state."""
    folder = write_realistic_run(tmp_path / "run", steps=False, telemetry=False)
    code = ("import sys; from llmperf.report.run import build_run_report; "
            f"build_run_report({str(folder)!r}); "
            "print('matplotlib.pyplot' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.strip() == "False"
