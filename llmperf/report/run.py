"""The report of one run: report.html in the run folder, its PNGs in plots/ beside it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from llmperf.measure.metrics import token_count_warning
from llmperf.report import figures
from llmperf.report.client_server import client_server_plots, split_rows
from llmperf.report.folder import RUN_FILES, RunFolder, load_run_folder
from llmperf.report.plotting import Plot, clear_plots, render
from llmperf.report.render import write_page
from llmperf.report.run_plots import RUN_PLOTS
from llmperf.report.session_plots import SESSION_PLOTS, has_sessions
from llmperf.report.steady import rate_line, steady_note, steady_rows
from llmperf.report.step_roofline import step_roofline

REPORT_FILE = "report.html"


@dataclass
class Banner:
    kind: str  # "bad", "partial" or "ok": the page's colour for it
    headline: str
    reasons: list[str] = field(default_factory=list)


def banners(run: RunFolder) -> list[Banner]:
    """What the reader must know before reading any figure: partial, not valid, or valid."""
    summary, out = run.summary, []
    if run.summary_from_records:
        out.append(Banner("partial", "PARTIAL RUN: it ended before writing summary.json", [
            f"The figures come from the {summary['num_requests']} measured requests recorded"
            " in requests.jsonl.",
            "SLO, goodput, roofline, cost and telemetry figures are missing."]))
    elif run.interrupted:
        out.append(Banner("partial", "PARTIAL RUN: interrupted before the end", [
            f"The figures cover the {summary.get('num_completed', '?')} requests completed of the"
            f" {summary.get('num_requests', '?')} measured before it stopped."]))
    if summary.get("saturated"):
        out.append(Banner("partial", f"SATURATED: stopped early at "
                          f"{summary['saturated_at_rps']:.3g} req/s", [summary["saturation_detail"]]))
    sources = summary.get("token_count_sources")
    warning = token_count_warning(summary.get("token_count_source"),
                                  sources if isinstance(sources, dict) else {})
    if warning:
        out.append(Banner("partial", "TOKENS ARE BYTES: token figures count UTF-8 bytes",
                          [warning]))
    failed = figures.failed_checks(summary)
    if summary.get("valid") is False:
        out.append(Banner("bad", "NOT VALID: do not trust these figures",
                          failed or ["the run says it is not valid, without a reason"]))
    elif summary.get("valid") is True and not run.interrupted:
        n = len(figures.validity(summary))
        warnings = figures.warnings(summary)
        passed = f"Valid: all {n} validity checks passed" if n else "Valid"
        if warnings:
            passed = f"Valid, with {len(warnings)} warning{'s' * (len(warnings) > 1)}"
        out.append(Banner("ok", passed, warnings))
    return out


def run_heading(run: RunFolder) -> str:
    """What ran, from the summary's objects, else from the resolved config (a run that died
    before its summary), else the folder's name."""
    return figures.run_title({**run.config, **run.summary}, run.path.name)


def run_plots(run: RunFolder, folder: Path) -> list[Plot]:
    plots = RUN_PLOTS + (SESSION_PLOTS if has_sessions(run) else ())
    return [render(folder, name, title, lambda make=make: make(run))
            for name, title, make in plots]


def build_run_report(run_dir: Path) -> Path:
    """Write run_dir/report.html (and run_dir/plots/*.png); returns the report's path."""
    run_dir = Path(run_dir)
    run = load_run_folder(run_dir)
    clear_plots(run_dir)
    return write_page(
        run_dir / REPORT_FILE,
        "run.html",
        title=run_heading(run),
        run_path=str(run_dir.resolve()),
        overrides=run.overrides,
        banners=banners(run),
        headline=figures.headline(run.summary),
        stats=figures.summary_stats(run.summary),
        latency_rows=figures.latency_rows(run.summary),
        stage_rows=figures.stage_rows(run.summary),
        from_records=run.summary_from_records,
        steady_rows=steady_rows(run.summary),
        steady_note=steady_note(run.summary),
        rate_line=rate_line(run.summary),
        step_roofline=step_roofline(run.summary),
        sections=figures.sections(run.summary),
        plots=run_plots(run, run_dir),
        server_family=run.summary.get("server_family"),
        split_rows=split_rows(run.summary),
        server_rows=figures.server_rows(run.summary),
        server_plots=client_server_plots(run, run_dir),
        checks=figures.validity(run.summary),
        config_yaml=run.config_yaml,
        environment=figures.flatten(run.environment) if run.environment else [],
        files_present=[f for f in RUN_FILES if f not in run.missing_files],
        files_missing=run.missing_files,
        notes=run.notes,
    )
