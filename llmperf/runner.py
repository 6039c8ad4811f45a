"""One benchmark run, as a list of stages that each do one thing to a `Run`.

    write_config       config.yaml, first, so even a run that fails says what it was
    build              the engine from its registry, and the scenario's workload for its tokenizer
    write_environment  environment.json, once the engine has loaded what it uses (torch, CUDA)
    drive_load         warmup then measured load, inside every AROUND_LOAD context (engine started, ...)
    write_step_stats   steps.jsonl, when the engine reports its steps
    summarize          the figures from the records, the config objects, the validity checks
    write_summary      summary.json and the table on the console

A new stage is one more entry in STAGES (a figure added to the summary goes after
`summarize`, a report built from the run folder goes last); something that must run
while the load runs (a telemetry collector) is one more entry in AROUND_LOAD.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from rich.console import Console

from engines.base import Engine
from engines.registry import build_engine
from engines.synthetic import ByteTokenizer
from llmperf.config import Config
from llmperf.console import LoadProgress, print_summary
from llmperf.environment import collect_environment
from llmperf.errors import UsageError
from llmperf.loadgen import LoadGenerator, LoadResult
from llmperf.metrics import compute_metrics
from llmperf.records import RecordWriter, RequestRecord
from llmperf.validity import check_validity
from llmperf.workload.requests import Workload

SCHEMA_VERSION = 1


@dataclass
class Run:
    config: Config
    run_dir: Path
    argv: list[str] = field(default_factory=list)
    console: Console = field(default_factory=Console)
    engine: Engine | None = None
    workload: Workload | None = None
    records: list[RequestRecord] = field(default_factory=list)
    load: LoadResult | None = None
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def interrupted(self) -> bool:
        return self.load is not None and self.load.interrupted


def write_config(run: Run) -> None:
    run.run_dir.mkdir(parents=True, exist_ok=True)
    (run.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(run.config)))


def build(run: Run) -> None:
    engine_cfg = run.config.engine
    try:
        run.engine = build_engine(engine_cfg.name, **engine_cfg.options(run.config.model))
    except ImportError as err:
        raise UsageError(f"engine={engine_cfg.name!r} is not available here: {err}") from None
    except ValueError as err:  # the engine rejected an option
        raise UsageError(f"engine={engine_cfg.name!r}: {err}") from None
    run.workload = Workload(run.config.scenario, run.engine.tokenizer or ByteTokenizer())


def write_environment(run: Run) -> None:
    environment = collect_environment(run.config.hardware, run.argv)
    _write_json(run.run_dir / "environment.json", environment)


@contextlib.contextmanager
def engine_running(run: Run) -> Iterator[None]:
    run.engine.start()
    try:
        yield
    finally:
        run.engine.stop()


AROUND_LOAD: list[Callable[[Run], contextlib.AbstractContextManager]] = [engine_running]


def drive_load(run: Run) -> None:
    scenario = run.config.scenario
    warmup = run.workload.warmup()
    total = scenario.num_requests + len(warmup) if scenario.num_requests else None
    with contextlib.ExitStack() as stack:
        for context in AROUND_LOAD:
            stack.enter_context(context(run))
        writer = stack.enter_context(RecordWriter(run.run_dir / "requests.jsonl"))
        progress = stack.enter_context(LoadProgress(total, run.console))

        def on_record(record: RequestRecord) -> None:
            writer.write(record)
            run.records.append(record)
            progress.update(record)

        loadgen = LoadGenerator(run.engine, on_record)
        concurrency = scenario.arrival.concurrency if run.workload.closed_loop else None
        run.load = asyncio.run(
            loadgen.run(warmup, run.workload.requests(), concurrency, scenario.duration_s)
        )


def write_step_stats(run: Run) -> None:
    """steps.jsonl: the engine's steps, with start_s moved to the records' clock."""
    step_stats = getattr(run.engine, "step_stats", None)
    if step_stats is None:
        return
    origin_s = run.load.origin_perf_counter_s
    with (run.run_dir / "steps.jsonl").open("w", encoding="utf-8") as f:
        for step in step_stats():
            row = step.to_dict()
            row["start_s"] = step.start_s - origin_s
            f.write(json.dumps(row) + "\n")


def summarize(run: Run) -> None:
    cfg = run.config
    run.summary = {
        "schema_version": SCHEMA_VERSION,
        "engine": {**run.engine.info(), "name": cfg.engine.name, "config": asdict(cfg.engine)},
        "scenario": asdict(cfg.scenario),
        "model": asdict(cfg.model),
        "hardware": cfg.hardware,
        "valid": False,
        "validity": [],
        "interrupted": run.load.interrupted,
        **compute_metrics(run.records, cfg.scenario.slo),
        "origin_unix_s": run.load.origin_unix_s,
        "origin_perf_counter_s": run.load.origin_perf_counter_s,
        "measure_start_s": run.load.measure_start_s,
    }
    checks = check_validity(run.summary, cfg.scenario.validity)
    run.summary["validity"] = [c.to_dict() for c in checks]
    run.summary["valid"] = all(c.ok for c in checks)


def write_summary(run: Run) -> None:
    _write_json(run.run_dir / "summary.json", run.summary)
    print_summary(run.summary, run.run_dir, run.console)


STAGES: list[Callable[[Run], None]] = [
    write_config,
    build,
    write_environment,
    drive_load,
    write_step_stats,
    summarize,
    write_summary,
]


def run_benchmark(
    config: Config, run_dir: Path, argv: list[str] | None = None, console: Console | None = None
) -> Run:
    run = Run(config, Path(run_dir), argv or [], console or Console())
    for stage in STAGES:
        stage(run)
    return run


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
