"""`llmperf-gate`: gate a run (or sweep) against a committed baseline; exit 0 pass, 1 regression
(or an invalid run), 2 usage error. Subcommands: `ab` (two commits, paired), `calibrate` (this
machine's false-alarm and detection rates), `history` (a figure across commits)."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from statistics import median
from typing import Any

from llmperf.gate.baseline import (
    Baseline,
    BaselineEntry,
    now_iso,
    provenance,
    provenance_mismatches,
)
from llmperf.gate.compare import judge
from llmperf.gate.errors import GateError
from llmperf.gate.history import write_figures
from llmperf.gate.metric_spec import DEFAULT_TOLERANCE, MetricSpec, Tolerance, parse_metric_arg
from llmperf.gate.provenance import describe, machine_facts, machine_mismatches
from llmperf.gate.render import baseline_table, console_table, markdown
from llmperf.gate.runs import Job, evaluate, load_jobs, validity_notes
from llmperf.gate.spread import aa_spread, spread_notes

EXIT_PASS, EXIT_REGRESSION, EXIT_USAGE = 0, 1, 2

# What `--update` records when no --metric is given and no baseline exists yet: for the CI
# sweep (scenario=mixed-offline over static, continuous, chunked), a within-sweep throughput
# ratio and work counts, figures that hold on a noisy shared machine.
DEFAULT_METRICS = (
    "output_throughput_tps@engine.batching=continuous/engine.batching=static:-25%",
    "steps.padded_fraction@engine.batching=static:+0.02",
    "steps.tokens_per_step@engine.batching=continuous:-15%",
    "steps.count@engine.batching=continuous:+5%",
)

# module -> (help); each has add_arguments(parser) and run(args) -> exit code
SUBCOMMANDS = {
    "ab": "run one benchmark on two commits, interleaved, and judge the paired change",
    "calibrate": "measure this machine's false-alarm and detection rates for `ab`",
    "history": "plot a figure across commits from reports/history.csv",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # One line like every other usage error of the gate, not usage + message.
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="llmperf-gate",
                description="Compare a run's or sweep's figures with a committed baseline.")
    p.add_argument("--baseline", required=True, type=Path, action="extend", nargs="+",
                   metavar="FILE",
                   help="baseline JSON, e.g. reports/baselines/ci-cpu.json; several: the one"
                        " recorded on the current runs' device model is used, else the first")
    p.add_argument("--current", required=True, action="append", type=Path, metavar="DIR",
                   help="run or sweep folder; give the flag once per repeat")
    p.add_argument("--metric", action="append", default=[], metavar="NAME[:TOL]",
                   help="metric to gate, e.g. output_throughput_tps:-5%% or ttft_s.p99:+10%% or"
                        " output_throughput_tps@engine.batching=continuous/engine.batching=static"
                        ":-10%%; default: the baseline's metrics and tolerances")
    p.add_argument("--markdown", type=Path, metavar="FILE",
                   help="also write the verdict as markdown (for a CI comment)")
    p.add_argument("--figures", type=Path, metavar="FILE",
                   help="also write the current medians as figures.json for `history --append`")
    p.add_argument("--update", action="store_true",
                   help="write the baseline from the current figures (all repeats) instead;"
                        " without --metric and without a baseline: "
                        + ", ".join(DEFAULT_METRICS).replace("%", "%%"))  # argparse formats help
    p.add_argument("--allow-invalid", action="store_true",
                   help="gate runs that failed their validity checks (or were interrupted)"
                        " with a warning, instead of failing")
    p.add_argument("--ci-repeats", type=int, default=2, metavar="K",
                   help="with --update: the repeats a gate run brings (.ci/run: 3); each metric's"
                        " A/A spread is the largest change a median of K of the recorded repeats"
                        " shows against the rest's (default 2)")
    p.add_argument("--size-tolerances", action="store_true",
                   help="with --update: widen each tolerance under twice its A/A spread to twice"
                        " it (never narrower than given)")
    p.add_argument("--allow-dirty", action="store_true",
                   help="let --update record runs made from a working tree with uncommitted changes")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        module = importlib.import_module(f"llmperf.gate.{argv[0]}")
        parser = _Parser(prog=f"llmperf-gate {argv[0]}", description=SUBCOMMANDS[argv[0]])
        module.add_arguments(parser)
        args, command = parser.parse_args(argv[1:]), module.run
    else:
        args, command = build_parser().parse_args(argv), run
    try:
        return command(args)
    except (GateError, OSError) as e:  # OSError: an unreadable folder, an unwritable file
        print(f"llmperf-gate: error: {e}", file=sys.stderr)
        return EXIT_USAGE


def run(args: argparse.Namespace) -> int:
    repeats = [(path, load_jobs(path)) for path in args.current]
    now = machine_facts(repeats[0][1][0])
    baseline_path, old, choice = pick_baseline(args.baseline, now, args.update)
    metrics = chosen_metrics(args.metric, old, args.update)
    current = {spec.name: [evaluate(spec, jobs, path) for path, jobs in repeats]
               for spec, _ in metrics}
    invalid = [note for _, jobs in repeats for job in jobs for note in validity_notes(job)]
    if invalid and not args.allow_invalid:
        print("\n".join([*(f"FAIL: {note}" for note in invalid),
                         "FAIL: invalid runs are not gated (--allow-invalid to gate them anyway)"]))
        return EXIT_REGRESSION
    warnings = list(invalid)
    if args.update:
        return write_baseline(args, baseline_path, metrics, current, repeats, warnings)
    warnings += choice

    results = []
    for spec, tolerance in metrics:
        entry = old.entries.get(spec.name)
        if entry is None:
            raise GateError(f"baseline {baseline_path} has no values for {spec.name};"
                            " record them with --update")
        results.append(judge(spec, tolerance, entry.values, current[spec.name]))
    warnings += provenance_mismatches(old.source, repeats[0][1][0])
    warnings += machine_mismatches(old.source.get("machine") or {}, now)
    origin = [f"baseline: {describe(old.source.get('machine') or {})}",
              f"current:  {describe(now)}"]
    print(console_table(results, warnings, origin))
    if args.figures:
        write_figures(args.figures, now, {r.spec.name: median(r.current) for r in results})
    if args.markdown:
        write_text(args.markdown, markdown(results, warnings, str(baseline_path), old,
                                           [str(p) for p in args.current]))
    return EXIT_REGRESSION if any(r.is_regression for r in results) else EXIT_PASS


def pick_baseline(paths: list[Path], now: dict[str, Any], update: bool
                  ) -> tuple[Path, Baseline | None, list[str]]:
    """The baseline recorded on the current runs' device model, else the first given, and a
    note when none was: a within-run ratio (int8 / bf16 step time, continuous / static
    throughput) depends on the CPU's instruction set, so each device model the gate meets
    gets its own baseline. --update writes the one given, or the one of this device."""
    device = now.get("device")
    loaded = [(p, None if update and not p.exists() else Baseline.load(p)) for p in paths]
    for path, baseline in loaded:
        if baseline is not None and device and baseline_device(baseline) == device:
            return path, baseline, []
    if update and len(paths) > 1:
        raise GateError(f"none of the {len(paths)} baselines was recorded on {device!r}:"
                        " give the one --baseline FILE to write")
    path, baseline = loaded[0]
    if len(paths) == 1 or baseline is None:
        return path, baseline, []
    recorded = ", ".join(repr(baseline_device(b)) for _, b in loaded if b is not None)
    return path, baseline, [f"no baseline of {len(paths)} was recorded on {device!r} (they were:"
                            f" {recorded}); gated against {path}. Record one on this device"
                            " (reports/baselines/README.md) and pass it too"]


def baseline_device(baseline: Baseline) -> str | None:
    return (baseline.source.get("machine") or {}).get("device")


def chosen_metrics(metric_args: list[str], old: Baseline | None, update: bool = False
                   ) -> list[tuple[MetricSpec, Tolerance]]:
    """--metric in the order given, tolerances from the flag, else the baseline, else 5%.

    Without --metric: the baseline's metrics; a new baseline (--update) gets DEFAULT_METRICS.
    """
    if not metric_args:
        if old is not None and old.entries:
            return [(e.spec, e.tolerance) for e in old.entries.values()]
        if not update:
            raise GateError("no metrics to gate: give --metric NAME[:TOLERANCE]"
                            " (e.g. output_throughput_tps:-5%)")
        metric_args = list(DEFAULT_METRICS)
    chosen: dict[str, tuple[MetricSpec, Tolerance]] = {}
    for text in metric_args:
        spec, tolerance = parse_metric_arg(text)
        if spec.name in chosen:
            raise GateError(f"metric {spec.name!r} is given twice")
        if tolerance is None:
            entry = old.entries.get(spec.name) if old else None
            tolerance = entry.tolerance if entry else DEFAULT_TOLERANCE
        chosen[spec.name] = (spec, tolerance)
    return list(chosen.values())


def write_baseline(args: argparse.Namespace, path: Path, metrics: list[tuple[MetricSpec, Tolerance]],
                   current: dict[str, list[float]], repeats: list[tuple[Path, list[Job]]],
                   warnings: list[str]) -> int:
    facts = machine_facts(repeats[0][1][0])
    if facts.get("git_dirty") and not args.allow_dirty:
        raise GateError(f"{repeats[0][0]} was run from a working tree with uncommitted changes,"
                        " so no commit names the code it measured; commit, rerun and --update"
                        " (or --allow-dirty)")
    notes, sized_notes, sized = [], [], []
    for spec, tol in metrics:
        spread = aa_spread(current[spec.name], args.ci_repeats, tol.relative)
        if args.size_tolerances and spread is not None and spread.sized(tol) != tol:
            wide = spread.sized(tol)
            sized_notes.append(f"{spec.name}: tolerance {tol.text(spec.direction)} widened to"
                         f" {wide.text(spec.direction)}, twice its A/A spread at"
                         f" {args.ci_repeats} repeats ({spread.text()})")
            tol = wide
        else:
            notes += spread_notes(spec.name, spread, tol, spec.direction, args.ci_repeats)
        sized.append((spec, tol))
    entries = {spec.name: BaselineEntry(spec, tol, current[spec.name]) for spec, tol in sized}
    baseline = Baseline(entries, {**provenance(repeats), "machine": facts}, now_iso())
    baseline.save(path)
    table = baseline_table(baseline)
    done = f"wrote {path}: {len(entries)} metrics from {len(repeats)} repeats"
    print("\n".join([table, *(f"sized: {n}" for n in sized_notes),
                      *(f"warning: {w}" for w in [*warnings, *notes]), done]))
    if args.markdown:
        write_text(args.markdown, f"### llmperf-gate: baseline updated\n\n{done}.\n\n"
                                  f"```\n{table}\n```\n")
    return EXIT_PASS


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
