"""One trial of a capacity search: a normal run at one rate or concurrency, in its own folder."""

from __future__ import annotations

import copy
from pathlib import Path

from rich.console import Console

from llmperf.run.config import Config
from llmperf.run.runner import run_benchmark
from llmperf.search.strategy import Trial
from llmperf.search.targets import SloTargets


def run_trial(
    config: Config,
    over: str,
    value: float,
    targets: SloTargets,
    run_dir: Path,
    argv: list[str],
) -> Trial:
    """Run the scenario at `value` (req/s or requests in flight), judged by `targets`.

    The run is a full one (config.yaml, requests.jsonl, summary.json, report), with the
    scenario's per-request SLO set from the targets so its goodput is the search's.
    """
    config = copy.deepcopy(config)
    arrival = config.scenario.arrival
    if over == "rate":
        arrival.rate_rps = value
    else:
        arrival.concurrency = int(value)
    config.scenario.slo = targets.per_request()
    run = run_benchmark(config, run_dir, argv=argv, console=Console(quiet=True))
    summary = run.summary
    met, score, misses = targets.margin(summary)
    failed, total = summary["num_failed"], summary["num_requests"]
    max_error_rate = config.scenario.validity.max_error_rate
    if total == 0 or failed / total > max_error_rate:
        misses.append(f"{failed} of {total} requests failed (allowed {max_error_rate:.1%})")
    if summary.get("saturated"):
        misses.append(summary["saturation_detail"])
    passed = not misses and not run.interrupted
    return Trial(
        value=value,
        passed=passed,
        score=max(score, 0.0) if passed else min(score, -0.01),
        served_rps=summary.get("request_throughput_rps"),
        saturated=bool(summary.get("saturated")),
        interrupted=run.interrupted,
        misses=misses,
        run_dir=str(run_dir),
        goodput_rps=summary.get("goodput_rps"),
        slo_attainment=summary.get("slo_attainment"),
    )
