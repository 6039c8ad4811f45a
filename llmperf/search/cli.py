"""The `llmperf-search` command: the highest request rate (or concurrency) meeting the SLOs,
or (search.mode=sweep) an automatic sweep from the lowest load to the highest, with its knee.

    llmperf-search slo.ttft_p99_s=0.5 slo.tpot_p99_s=0.05 slo.attainment=0.99 \\
        [search.over=rate|concurrency search.start=4 search.max_trials=8 ...] \\
        [any llmperf override: engine=openai scenario=chat scenario.duration_s=60 ...]
    llmperf-search search.mode=sweep [search.rates=8] [slo.ttft_p99_s=0.5 ...] \\
        [any llmperf override]

Each trial is a normal run (its own folder under the search's folder); the search writes
search.json, search.csv, plots/goodput.png (the sweep: plots/sweep.png) and search.html
beside them. The sweep's SLOs are optional: they set the per-request SLO its goodput counts.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import asdict
from pathlib import Path

from hydra import initialize_config_module

from llmperf.cli import CONFIG_MODULE, EXIT_INTERRUPTED, EXIT_USAGE, compose_config
from llmperf.errors import UsageError
from llmperf.run.config import Config, register_configs
from llmperf.search.output import SearchResult, write_search
from llmperf.search.strategy import SearchConfig, Trial, bracket, converged, next_value
from llmperf.search.sweep import knee_rps, run_sweep_trial, spaced_rates
from llmperf.search.sweep_output import SweepResult, write_sweep
from llmperf.search.targets import SloTargets, parse_targets
from llmperf.search.trials import run_trial
from llmperf.workload.arrivals import ARRIVALS
from llmperf.workload.requests import check_inputs

_SEARCH_TYPES = {f.name: f.type for f in dataclasses.fields(SearchConfig)}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return
    try:
        targets, search, config = parse_command_line(argv)
        if search.mode == "sweep":
            result = sweep_load(config, targets, search, argv)
        else:
            result = search_capacity(config, targets, search, argv)
    except UsageError as err:
        print(f"llmperf-search: error: {' '.join(str(err).split())}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    print(result.headline())
    if any(t.interrupted for t in result.trials):
        sys.exit(EXIT_INTERRUPTED)


def parse_command_line(argv: list[str]) -> tuple[SloTargets, SearchConfig, Config]:
    slo: dict[str, str] = {}
    search: dict[str, object] = {}
    overrides: list[str] = []
    for arg in argv:
        key, sep, text = arg.partition("=")
        if key.startswith("slo.") and sep:
            slo[key.removeprefix("slo.")] = text
        elif key.startswith("search.") and sep:
            search[key.removeprefix("search.")] = _search_value(key, text)
        else:
            overrides.append(arg)
    config = SearchConfig(**search)
    targets = parse_targets(slo) if slo or config.mode == "capacity" else None
    register_configs()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        run_config = compose_config(overrides)
    check_inputs(run_config.scenario)
    if config.mode == "sweep":
        _check_sweep(run_config)
    else:
        _check_variable(run_config, config)
    return targets, config, run_config


def sweep_load(
    config: Config, targets: SloTargets | None, search: SearchConfig, argv: list[str]
) -> SweepResult:
    """The synchronous trial, the throughput trial, then `search.rates` rates between them."""
    folder = Path(search.output_dir or f"reports/searches/{time.strftime('%Y-%m-%d_%H-%M-%S')}")
    folder.mkdir(parents=True, exist_ok=True)
    slo = targets.per_request() if targets is not None else None
    trials = []
    plan: list[tuple[str, float | None]] = [("synchronous", None), ("throughput", None)]
    why = "every rate ran"
    while plan:
        kind, rate = plan.pop(0)
        name = kind if rate is None else f"rate-{rate:.4g}"
        run_dir = folder / f"trial-{len(trials) + 1:02d}_{name}"
        trial = run_sweep_trial(config, kind, rate, run_dir, argv, slo)
        trials.append(trial)
        shown = "-" if trial.rate_rps is None else f"{trial.rate_rps:.4g} req/s"
        verdict = f", keeps up: {'yes' if trial.keeps_up else 'no'}" if kind == "rate" else ""
        print(f"trial {len(trials)} ({kind}): {shown}{verdict}", flush=True)
        if trial.interrupted:
            why = "interrupted"
            break
        if kind == "throughput":
            low, high = trials[0].rate_rps, trial.rate_rps
            if low is None or high is None:
                why = "the synchronous or throughput trial completed no request"
                break
            plan = [("rate", r) for r in spaced_rates(low, high, search.rates)]
    result = SweepResult(knee_rps(trials), asdict(slo or config.scenario.slo), trials, why)
    page = write_sweep(folder, result)
    print(f"sweep: {page}")
    return result


def _check_sweep(config: Config) -> None:
    if config.scenario.num_requests is None:
        raise UsageError("search.mode=sweep: set scenario.num_requests (the throughput trial"
                         " sends them all at once)")
    if config.scenario.sessions.turns:
        raise UsageError("search.mode=sweep: multi-turn sessions have no request rate to sweep")
    if getattr(config.scenario, "stages", None):
        raise UsageError("search.mode=sweep: scenario.stages set their own loads; the sweep"
                         " picks each trial's")


def search_capacity(
    config: Config, targets: SloTargets, search: SearchConfig, argv: list[str]
) -> SearchResult:
    over = _variable(config, search)
    arrival = config.scenario.arrival
    value: float | None = search.start or (arrival.rate_rps if over == "rate" else arrival.concurrency)
    integer = over == "concurrency"
    if integer:
        value = float(max(1, round(value)))
    folder = Path(search.output_dir or f"reports/searches/{time.strftime('%Y-%m-%d_%H-%M-%S')}")
    folder.mkdir(parents=True, exist_ok=True)
    trials: list[Trial] = []
    while value is not None:
        run_dir = folder / f"trial-{len(trials) + 1:02d}_{over}-{value:.4g}"
        trial = run_trial(config, over, value, targets, run_dir, argv)
        trials.append(trial)
        verdict = "met the SLOs" if trial.passed else "missed: " + "; ".join(trial.misses)
        print(f"trial {len(trials)}: {over} {value:.4g}: {verdict}", flush=True)
        if trial.interrupted:
            break
        value = next_value(trials, search, integer)
    lo, hi = bracket(trials)
    if trials[-1].interrupted:
        why = "interrupted"
    elif converged(lo, hi, search, integer):
        why = f"converged: the capacity lies in [{lo:.4g}, {hi:.4g})"
    elif len(trials) >= search.max_trials:
        why = f"stopped after search.max_trials={search.max_trials} trials"
    else:
        why = "no value left to try"
    result = SearchResult(over, lo, targets.to_dict(), trials, why)
    page = write_search(folder, result)
    print(f"search: {page}")
    return result


def _variable(config: Config, search: SearchConfig) -> str:
    if search.over is not None:
        return search.over
    return "concurrency" if ARRIVALS[config.scenario.arrival.process].closed_loop else "rate"


def _check_variable(config: Config, search: SearchConfig) -> None:
    process = config.scenario.arrival.process
    over = _variable(config, search)
    if over == "rate" and not ARRIVALS[process].needs_rate:
        raise UsageError(
            f"search.over=rate: scenario.arrival.process={process!r} has no rate; use constant, "
            "poisson, gamma or ramp (or search.over=concurrency with the closed process)"
        )
    if over == "concurrency" and not ARRIVALS[process].closed_loop:
        raise UsageError(
            f"search.over=concurrency: scenario.arrival.process={process!r} is not the closed loop;"
            " add scenario.arrival.process=closed scenario.arrival.concurrency=1"
        )


def _search_value(key: str, text: str) -> object:
    name = key.removeprefix("search.")
    if name not in _SEARCH_TYPES:
        raise UsageError(f"{key}: no such option; valid: {', '.join('search.' + n for n in _SEARCH_TYPES)}")
    kind = str(_SEARCH_TYPES[name])
    if "int" in kind or "float" in kind:
        try:
            return int(text) if "int" in kind else float(text)
        except ValueError:
            raise UsageError(f"{key}={text!r}: not a number") from None
    return None if text in ("null", "") else text


if __name__ == "__main__":
    main()
