"""One benchmark run, as a list of stages that each do one thing to a `Run`.

    write_config       config.yaml, first, so even a run that fails says what it was
    resolve_hardware   the hardware profile (a datasheet, or this machine's probed ceilings)
    launch_server      the server `engine.launch` names, started and ready (log in server.log);
                       stopped when the run ends, however it ends
    build              the engine from its registry, and the scenario's workload for its tokenizer
    write_environment  environment.json, once the engine has loaded what it uses (torch, CUDA)
    drive_load         warmup then measured load, inside every AROUND_LOAD context
                       (engine started, telemetry collected, the server's /metrics
                       scraped; samples then put on the records' clock); a launched
                       server that dies stops the sending
    stop_server        the launched server, once the load is over (its exit code recorded)
    write_step_stats   steps.jsonl, when the engine reports its steps
    write_telemetry    telemetry.csv, on the records' clock
    write_server_metrics  server_metrics.csv, on the records' clock
    summarize          the figures from the records and the config objects
    add_server_figures the server's figures over the measured window, and the client
                       latency split into server queue, prefill, decode and overhead
    add_prefix_cache_figures  the measured prefix-cache hit rate (the engine's counter, else
                       the server's) beside the expected one
    add_hardware_figures  telemetry peaks and energy, roofline MBU/MFU, cost per token
    judge_validity     the validity checks over the whole summary
    write_summary      summary.json and the table on the console
    write_report       report.html with its plots

A new stage is one more entry in STAGES (a figure added to the summary goes after
`summarize`, a report built from the run folder goes last); something that must run
while the load runs (a telemetry collector) is one more entry in AROUND_LOAD.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from rich.console import Console

from engines.registry import build_engine
from engines.synthetic import ByteTokenizer
from llmperf.errors import UsageError
from llmperf.hardware.registry import resolve_profile
from llmperf.measure.backends import LOAD_BACKENDS, backend_name
from llmperf.measure.backends.plan import LoadParts
from llmperf.measure.client_cpu import client_summary
from llmperf.measure.metrics import (
    compute_metrics,
    distribution,
    percentiles_in_use,
    session_metrics,
    token_count_mismatches,
)
from llmperf.measure.records import RecordWriter, RequestRecord
from llmperf.measure.stages import saturated_stage, stage_figures
from llmperf.measure.steady import offered_rate_metrics, steady_metrics
from llmperf.measure.summary import Summary
from llmperf.measure.validity import check_validity
from llmperf.run.config import Config
from llmperf.run.console import LoadProgress, print_summary
from llmperf.run.environment import collect_environment
from llmperf.run.launch import launch_server, stop_server
from llmperf.run.load_plan import context_tokens, load_plan
from llmperf.run.secrets import masked_argv, masked_config, masked_engine
from llmperf.run.state import Run
from llmperf.run.summary_figures import (
    add_hardware_figures,
    add_load_backend_figures,
    add_prefix_cache_figures,
    add_server_figures,
    model_label,
    saturation_summary,
)
from llmperf.serverside.scraper import MetricsScraper
from llmperf.telemetry import Collector, SamplerUnavailable
from llmperf.workload.requests import Workload


def write_config(run: Run) -> None:
    run.run_dir.mkdir(parents=True, exist_ok=True)
    (run.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(masked_config(run.config)))


def resolve_hardware(run: Run) -> None:
    try:
        run.profile = resolve_profile(run.config.hardware)
    except ValueError as err:
        raise UsageError(f"hardware: {err}") from None


def build(run: Run) -> None:
    engine_cfg = run.config.engine
    try:
        model = run.config.model
        run.engine = build_engine(engine_cfg.with_model(model), engine_cfg.model_for(model))
    except ImportError as err:
        raise UsageError(f"engine={engine_cfg.name!r} is not available here: {err}") from None
    except (ValueError, OSError) as err:  # the engine rejected an option, or a file
        raise UsageError(f"engine={engine_cfg.name!r}: {err}") from None
    run.workload = Workload(run.config.scenario, run.engine.tokenizer or ByteTokenizer())
    context = context_tokens(run)
    prefix = run.config.scenario.prefix
    if prefix.groups and context is not None and prefix.length >= context:
        raise UsageError(
            f"scenario.prefix.length={prefix.length}: longer than the engine's context "
            f"(max_model_len {context}); the prompt must fit after it"
        )


def write_environment(run: Run) -> None:
    environment = collect_environment(run.profile.to_dict(), masked_argv(run.argv))
    if run.server is not None:
        environment["server"] = run.server.describe()
    _write_json(run.run_dir / "environment.json", environment)


@contextlib.contextmanager
def engine_running(run: Run) -> Iterator[None]:
    run.engine.start()
    try:
        yield
    finally:
        run.engine.stop()


@contextlib.contextmanager
def telemetry_collected(run: Run) -> Iterator[None]:
    cfg = run.config.telemetry
    if not cfg.enabled:
        yield
        return
    collector = Collector(cfg.interval_s, cfg.source, cfg.device_indices)
    try:
        collector.start()
    except SamplerUnavailable as err:
        raise UsageError(f"telemetry.source={cfg.source!r}: {err}") from None
    except ValueError as err:  # a device index this machine does not have
        raise UsageError(f"telemetry.device_indices={cfg.device_indices!r}: {err}") from None
    run.collector = collector
    try:
        yield
    finally:
        collector.stop()


@contextlib.contextmanager
def server_metrics_scraped(run: Run) -> Iterator[None]:
    """Inside engine_running: the server is up before the first scrape, and still up for the last."""
    url = run.config.engine.metrics_endpoint()
    if url is None:
        yield
        return
    scraper = MetricsScraper(url, run.config.engine.metrics_interval_s,
                             probe_url=run.config.engine.round_trip_endpoint())
    reason = scraper.start()
    if reason is not None:
        run.console.print(f"no server-side view: {reason}", markup=False, highlight=False)
        yield
        return
    run.scraper = scraper
    try:
        yield
    finally:
        scraper.stop()


AROUND_LOAD: list[Callable[[Run], contextlib.AbstractContextManager]] = [
    telemetry_collected,
    engine_running,
    server_metrics_scraped,
]


def drive_load(run: Run) -> None:
    scenario = run.config.scenario
    warmup = run.workload.warmup()
    total = scenario.num_requests + len(warmup) if scenario.num_requests else None
    if scenario.stages:
        counts = [s.num_requests for s in scenario.stages]
        total = sum(counts) + len(warmup) if all(counts) else None
    with contextlib.ExitStack() as stack:
        for context in AROUND_LOAD:
            stack.enter_context(context(run))
        writer = stack.enter_context(RecordWriter(run.run_dir / "requests.jsonl"))
        progress = stack.enter_context(LoadProgress(total, run.console))

        def on_record(record: RequestRecord) -> None:
            writer.write(record)
            run.records.append(record)
            progress.update(record)

        open_window = run.scraper.scrape_now if run.scraper is not None else (lambda: None)
        concurrency = scenario.arrival.concurrency if run.workload.closed_loop else None
        saturation = scenario.saturation if scenario.saturation.enabled and concurrency is None else None
        name = backend_name(scenario.client)
        parts = LoadParts(
            engine=run.engine,
            engine_options=run.config.engine.with_model(run.config.model),
            model=run.config.engine.model_for(run.config.model),
            on_record=on_record,
            saturation=saturation,
            record_tokens=scenario.record_tokens,
            on_measure_start=open_window,
            max_concurrency=scenario.arrival.max_concurrency,
            clock_limit_s=scenario.validity.max_clock_uncertainty_s,
        )
        backend = LOAD_BACKENDS.get(name).from_options(scenario.client, parts)
        if run.server is not None:
            stack.enter_context(run.server.watched(backend.stop_sending))
        run.load = backend.run(load_plan(run, warmup, concurrency, one_loop=name == "loop"))
        run.clocks, run.workers_lost = backend.clocks, backend.lost
    if run.collector is not None:  # stopped now: its samples move onto the records' clock
        run.collector.rebase(run.load.origin_perf_counter_s)
    if run.scraper is not None:
        run.scraper.rebase(run.load.origin_perf_counter_s)
    if run.load.saturation is not None:
        run.console.print(f"[bold red]stopped early: {run.load.saturation.describe()}[/]")


def write_step_stats(run: Run) -> None:
    """steps.jsonl: the engine's steps, with start_s moved to the records' clock."""
    if not run.engine.capabilities.step_stats:
        return
    origin_s = run.load.origin_perf_counter_s
    with (run.run_dir / "steps.jsonl").open("w", encoding="utf-8") as f:
        for step in run.engine.step_stats():
            row = step.to_dict()
            row["start_s"] = step.start_s - origin_s
            f.write(json.dumps(row) + "\n")


def write_telemetry(run: Run) -> None:
    if run.collector is not None:
        run.collector.write_csv(run.run_dir / "telemetry.csv")


def write_server_metrics(run: Run) -> None:
    if run.scraper is not None:
        run.scraper.write_csv(run.run_dir / "server_metrics.csv")


def summarize(run: Run) -> None:
    cfg = run.config
    run.summary = Summary(
        engine={**run.engine.info(), "name": cfg.engine.name, "config": masked_engine(asdict(cfg.engine))},
        scenario=asdict(cfg.scenario),
        model={**asdict(cfg.model), "label": model_label(run)},
        hardware=run.profile.to_dict() if run.profile else cfg.hardware,
        interrupted=run.load.interrupted,
        stopped=run.load.stopped,
        server=run.server.describe() if run.server is not None else None,
        figures={
            **saturation_summary(run.load),
            **compute_metrics(run.records, cfg.scenario.slo,
                              capped=cfg.scenario.arrival.max_concurrency is not None),
            **steady_metrics(run.records, cfg.scenario.slo, closed_loop_concurrency(run)),
            # with stages, each stage asks its own rate (summary.json's `stages`)
            **offered_rate_metrics(run.records, None if cfg.scenario.stages else cfg.scenario.arrival,
                                   run.workload.has_sessions),
            **session_metrics(run.records, cfg.scenario.prefix.block_tokens),
            **token_count_mismatches(run.records),
            "event_loop_lag_s": distribution(run.load.loop_lag_s),
            **client_summary(run.load.client_cpu, run.records, run.load.loop_lag_s,
                             cfg.scenario.validity.max_client_delay_s),
        },
        origin_unix_s=run.load.origin_unix_s,
        origin_perf_counter_s=run.load.origin_perf_counter_s,
        measure_start_s=run.load.measure_start_s,
    ).to_dict()
    if cfg.scenario.stages:
        stages = run.summary["stages"] = stage_figures(run.records, cfg.scenario, run.load.stages)
        index = saturated_stage(stages)
        if index is not None:
            run.summary["saturation_detail"] += (f"; in stage {index} ({stages[index]['load']}),"
                                                 " which ended the run")


def closed_loop_concurrency(run: Run) -> int | None:
    """The closed loop's concurrency (its steady window's plateau); None for an open loop."""
    return run.config.scenario.arrival.concurrency if run.workload.closed_loop else None


def judge_validity(run: Run) -> None:
    checks = check_validity(run.summary, run.config.scenario.validity)
    run.summary["validity"] = [c.to_dict() for c in checks]
    run.summary["valid"] = all(c.ok for c in checks if c.blocking)


def write_summary(run: Run) -> None:
    run.summary = Summary.from_dict(run.summary).to_dict()
    _write_json(run.run_dir / "summary.json", run.summary)
    print_summary(run.summary, run.run_dir, run.console)


def write_report(run: Run) -> None:
    if run.config.report.enabled:
        from llmperf.report.run import build_run_report

        path = build_run_report(run.run_dir)
        run.console.print(f"report: {path}")


STAGES: list[Callable[[Run], None]] = [
    write_config,
    resolve_hardware,
    launch_server,
    build,
    write_environment,
    drive_load,
    stop_server,
    write_step_stats,
    write_telemetry,
    write_server_metrics,
    summarize,
    add_load_backend_figures,
    add_server_figures,
    add_prefix_cache_figures,
    add_hardware_figures,
    judge_validity,
    write_summary,
    write_report,
]


def run_benchmark(
    config: Config, run_dir: Path, argv: list[str] | None = None, console: Console | None = None
) -> Run:
    run = Run(config, Path(run_dir), argv or [], console or Console())
    with run.resources, _sigterm_as_exit(), percentiles_in_use(config.report.percentiles):
        for stage in STAGES:
            stage(run)
    return run


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """SIGTERM unwinds the run like an error, so what it started (a server) is stopped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def exit_now(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, exit_now)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
