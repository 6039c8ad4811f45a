"""`llmperf-gate calibrate`: how often `ab` cries wolf here, and how small a slowdown it catches.

    flock /tmp/llmperf-heavy.lock llmperf-gate calibrate [--rounds 12] [--pairs 8] [--trials 20]

Both sides run the working tree's code. Each round runs the benchmark once per condition, in
an order that rotates from round to round: the base (A), an identical second run (A', the
A/A condition) and one run per injected slowdown (`engine.inject_slowdown=F`: every engine
step spins F x its own time more). A condition's pair in a round is (A, that run). A gate run
is `ab`'s verdict on `--pairs` rounds drawn without replacement; `--trials` gate runs per
condition give the false-alarm rate (A/A) and the detection rates. Gate runs drawn from the
same rounds share pairs, so they are not independent: more rounds, less overlap.

With --lockstep each condition's pair is its own: a run of the base beside that condition's run,
both at once on one CPU, their steps taking turns (llmperf.gate.lockstep), in folders
roundR-SLUG-a (the base) and roundR-SLUG; the condition holding the first turn alternates.
"""

from __future__ import annotations

import argparse
import json
import math
from datetime import datetime
from pathlib import Path

import numpy as np

from llmperf.gate import lockstep
from llmperf.gate.ab import DEFAULT_MODE, DEFAULT_PAIRS, DEFAULT_TOLERANCE, percent
from llmperf.gate.ab_figures import FIGURES, figure_named, read_figures, readable
from llmperf.gate.ab_verdict import change_text, judge_figure
from llmperf.gate.checkout import repo_root, resolve_commit
from llmperf.gate.compare import REGRESSION
from llmperf.gate.errors import GateError
from llmperf.gate.paired import MIN_PAIRS
from llmperf.gate.provenance import describe, machine_facts
from llmperf.gate.runs import load_job
from llmperf.gate.sides import DEFAULT_BENCHMARK, DEFAULT_THREADS, Side, fresh_folder, run_once

DEFAULT_ROUNDS = 12
DEFAULT_TRIALS = 20
DEFAULT_SLOWDOWNS = (0.05, 0.10, 0.20)
POWER = 0.95
_Z95 = 1.6449  # one-sided 95% normal quantile
_HL_EFFICIENCY = 3 / math.pi  # Hodges-Lehmann against the mean, normal noise


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, metavar="N",
                   help=f"rounds of runs, one run per condition each (default {DEFAULT_ROUNDS})")
    p.add_argument("--pairs", type=int, default=DEFAULT_PAIRS, metavar="N",
                   help=f"pairs per gate run, as `ab --pairs` (default {DEFAULT_PAIRS})")
    p.add_argument("--trials", type=int, default=DEFAULT_TRIALS, metavar="N",
                   help=f"gate runs per condition (default {DEFAULT_TRIALS})")
    p.add_argument("--slowdowns", type=_slowdowns, default=DEFAULT_SLOWDOWNS, metavar="LIST",
                   help="injected slowdowns, comma-separated (default 5%%,10%%,20%%)")
    p.add_argument("--tolerance", type=percent, default=DEFAULT_TOLERANCE, metavar="PCT",
                   help="the tolerance `ab` will use (default 3%%)")
    p.add_argument("--figure", default="decode_step_p10_s", metavar="NAME",
                   help="the timed figure to calibrate (default decode_step_p10_s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the draws of pairs")
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS, metavar="N",
                   help=f"torch threads of each run, as `ab --threads` (default {DEFAULT_THREADS})")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--lockstep", dest="mode", action="store_const", const=lockstep.LOCKSTEP,
                      help="each condition's pair in lockstep, as `ab --lockstep`")
    mode.add_argument("--sequential", dest="mode", action="store_const",
                      const=lockstep.SEQUENTIAL, help="runs one after the other (the default)")
    p.set_defaults(mode=DEFAULT_MODE)
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="where the runs and calibrate.json go (default reports/calibrate/<timestamp>)")
    p.add_argument("--from", dest="from_dirs", type=Path, action="append", metavar="DIR",
                   help="judge the complete rounds earlier calibrations left in DIR (one cut"
                        " short included) instead of running; repeatable, the rounds add up")
    p.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                   help="llmperf overrides after --; default: ab's benchmark")


def _slowdowns(text: str) -> tuple[float, ...]:
    values = tuple(percent(part) for part in text.split(",") if part.strip())
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"slowdowns must be > 0%, got {text!r}")
    return values


def run(args: argparse.Namespace) -> int:
    figure = figure_named(args.figure)
    if not figure.timed:
        raise GateError(f"{args.figure} is a counter; calibrate a timed figure:"
                        f" {', '.join(n for n, f in FIGURES.items() if f.timed)}")
    if args.mode == lockstep.LOCKSTEP and figure.name in lockstep.WALL_CLOCK:
        raise GateError(f"{figure.name} is read off the run's wall clock, which in lockstep"
                        f" holds the other side's steps too; calibrate it with --sequential")
    if args.threads < 0:
        raise GateError(f"--threads {args.threads} must be >= 0 (0: torch's default)")
    if not MIN_PAIRS <= args.pairs <= (10**6 if args.from_dirs else args.rounds):
        raise GateError(f"--pairs {args.pairs} must be between {MIN_PAIRS} and --rounds"
                        f" {args.rounds}")
    conditions = {"A": (), "A/A": ()} | {
        f"+{s * 100:g}%": (f"engine.inject_slowdown={s}",) for s in args.slowdowns}
    if args.from_dirs:
        out = args.from_dirs[0]
        values: dict[str, list[dict[str, float]]] = {}
        for folder in args.from_dirs:
            for name, runs in measured(folder, list(conditions)).items():
                values[name] = values.get(name, []) + runs
        args.rounds = len(values["A/A"])
        if args.rounds < args.pairs:
            raise GateError(f"{out} holds {args.rounds} complete rounds, fewer than --pairs"
                            f" {args.pairs}")
    else:
        root = repo_root(Path.cwd())
        side = Side("head", root, None, f"working tree at {resolve_commit(root, 'HEAD')[:12]}")
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        out = fresh_folder(args.out or Path("reports/calibrate") / stamp)
        values = measure(side, args.overrides or list(DEFAULT_BENCHMARK), conditions,
                         args.rounds, out, args.threads, args.mode)
    report = judge_conditions(values, figure.name, args)
    report["mode"] = lockstep.LOCKSTEP if "A|A/A" in values else lockstep.SEQUENTIAL
    first = out / ("round0-aa-a" if "A|A/A" in values else "round0-a")
    report["machine"] = describe(machine_facts(load_job(first)))
    print_report(report, args)
    (out / "calibrate.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


def measure(side: Side, overrides: list[str], conditions: dict[str, tuple[str, ...]],
            rounds: int, out: Path, threads: int = DEFAULT_THREADS,
            mode: str = lockstep.SEQUENTIAL) -> dict[str, list[dict[str, float]]]:
    """Every timed figure of every run, per condition, one entry per round; in lockstep each
    condition's own base runs under "A|<condition>"."""
    names = list(conditions) if mode == lockstep.SEQUENTIAL else list(conditions)[1:]
    figures = [f for f in FIGURES.values() if f.timed]
    values: dict[str, list[dict[str, float]]] = {}

    def add(name: str, job) -> None:
        values.setdefault(name, []).append(read_figures(job, readable([job], figures)[0]))

    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        print(f"round {r + 1}/{rounds}: {' '.join(order)}", flush=True)
        for k, name in enumerate(order):
            folder = out / f"round{r}-{_slug(name)}"
            extra = [*overrides, *conditions[name]]
            if mode == lockstep.SEQUENTIAL:
                add(name, run_once(side, extra, folder, threads))
                continue
            base_first = (r * len(names) + k) % 2 == 0
            runs = ((overrides, folder.with_name(f"{folder.name}-a")), (extra, folder))
            if not base_first:
                runs = runs[::-1]
            jobs, _ = lockstep.run_pair(side, side, (runs[0][0], runs[1][0]),
                                        (runs[0][1], runs[1][1]), threads)
            base, head = jobs if base_first else jobs[::-1]
            add(f"A|{name}", base)
            add(name, head)
    return values


def measured(out: Path, names: list[str]) -> dict[str, list[dict[str, float]]]:
    """The figures of every complete round (a run folder per condition) left in `out`."""
    if not out.is_dir():
        raise GateError(f"calibration folder not found: {out}")
    figures = [f for f in FIGURES.values() if f.timed]
    if (out / "round0-aa-a").is_dir():  # lockstep: each condition beside its own base run
        folders = {n: f"{_slug(n)}" for n in names[1:]} | {
            f"A|{n}": f"{_slug(n)}-a" for n in names[1:]}
    else:
        folders = {n: _slug(n) for n in names}
    values: dict[str, list[dict[str, float]]] = {name: [] for name in folders}
    r = 0
    while all((out / f"round{r}-{f}" / "summary.json").is_file() for f in folders.values()):
        for name, f in folders.items():
            job = load_job(out / f"round{r}-{f}")
            values[name].append(read_figures(job, readable([job], figures)[0]))
        r += 1
    if r == 0:
        raise GateError(f"{out} holds no complete round of runs ({', '.join(names)})")
    return values


def judge_conditions(values: dict[str, list[dict[str, float]]], figure_name: str,
                     args: argparse.Namespace) -> dict:
    figure = figure_named(figure_name)
    if any(figure_name not in v for runs in values.values() for v in runs):
        raise GateError(f"some runs do not report {figure_name}")

    def base(name: str) -> list[float]:  # the runs `name`'s runs pair with
        return [v[figure_name] for v in values.get(f"A|{name}") or values["A"]]

    rng = np.random.default_rng(args.seed)
    draws = [sorted(rng.choice(args.rounds, size=args.pairs, replace=False).tolist())
             for _ in range(args.trials)]
    rows = {}
    for name, runs in values.items():
        if name == "A" or name.startswith("A|"):
            continue
        head, before = [v[figure_name] for v in runs], base(name)
        caught = sum(judge_figure(figure, [before[i] for i in d], [head[i] for i in d],
                                  args.tolerance).verdict == REGRESSION for d in draws)
        whole = judge_figure(figure, before, head, args.tolerance)
        rows[name] = {"flagged": caught, "trials": args.trials, "change": whole.point,
                      "low": whole.low, "high": whole.high}
    log_ratios = [math.log(h / b) for b, h in zip(base("A/A"),
                                                   [v[figure_name] for v in values["A/A"]],
                                                   strict=True)]
    spread = float(np.std(log_ratios, ddof=1))
    detected = [s for s in args.slowdowns if rows[f"+{s * 100:g}%"]["flagged"] >= POWER * args.trials]
    return {
        "figure": figure_name, "rounds": args.rounds, "pairs": args.pairs,
        "trials": args.trials, "tolerance": args.tolerance, "conditions": rows,
        "aa_log_ratio_std": spread,
        "smallest_detected": min(detected) if detected else None,
        # Normal approximation: the effect whose 95% lower bound clears the tolerance 95% of the time.
        "smallest_detected_model": math.expm1(
            math.log1p(args.tolerance) + 2 * _Z95 * spread / math.sqrt(_HL_EFFICIENCY * args.pairs)),
    }


def print_report(report: dict, args: argparse.Namespace) -> None:
    print(f"\n{report['figure']}: {args.pairs} pairs per gate run, tolerance"
          f" {args.tolerance * 100:g}%, {args.trials} gate runs per condition drawn from"
          f" {args.rounds} rounds")
    print(f"{'condition':<10} {'flagged':>9}  measured change over all rounds")
    for name, row in report["conditions"].items():
        what = "false alarms" if name == "A/A" else "detected"
        print(f"{name:<10} {row['flagged']:>3}/{row['trials']:<5} {change_text(row['change'])}"
              f" ({change_text(row['low'])} .. {change_text(row['high'])})  {what}")
    smallest = report["smallest_detected"]
    print(f"A/A log-ratio spread (std) {report['aa_log_ratio_std'] * 100:.2f}%")
    print("smallest injected slowdown detected at 95% power: "
          + (f"{smallest * 100:g}%" if smallest is not None else "none of those tried")
          + f" (normal model from the A/A spread: {report['smallest_detected_model'] * 100:.1f}%)")
    print(f"mode: {report['mode']}; machine: {report['machine']}")


def _slug(name: str) -> str:
    return {"A": "a", "A/A": "aa"}.get(name) or "slow" + name.strip("+%")

