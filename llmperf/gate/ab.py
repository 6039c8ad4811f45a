"""`llmperf-gate ab`: run one benchmark on two commits, interleaved, and judge the paired change.

    llmperf-gate ab --base main [--head REF] [--pairs 8] [--tolerance 5%] [--lockstep]
                    -- [llmperf overrides]

The base (and the head, when --head names a ref) is checked out in a temporary git worktree;
without --head the head is the working tree as it is, uncommitted changes included. Exit 0
pass, 1 regression (or an invalid run), 2 usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from statistics import median

from llmperf.gate import lockstep
from llmperf.gate.ab_figures import (
    DEFAULT_FIGURES,
    Figure,
    figure_named,
    read_figures,
    readable,
)
from llmperf.gate.ab_verdict import ABResult, change_text, judge_figure
from llmperf.gate.baseline import Baseline
from llmperf.gate.checkout import dirty_files, repo_root, resolve_commit, side_trees
from llmperf.gate.compare import IMPROVED, REGRESSION, WITHIN_NOISE
from llmperf.gate.errors import GateError
from llmperf.gate.history import write_figures
from llmperf.gate.paired import CONFIDENCE, MIN_PAIRS
from llmperf.gate.provenance import describe, machine_facts
from llmperf.gate.runs import validity_notes
from llmperf.gate.sides import (
    DEFAULT_BENCHMARK,
    DEFAULT_THREADS,
    Pair,
    Side,
    fresh_folder,
    pin_cpus,
    run_pairs,
    terminated_as_exit,
)

DEFAULT_PAIRS = 12  # docs/gate.md, "Calibration": what 10% needs on a noisy 2-core machine
DEFAULT_TOLERANCE = 0.03  # timed figures (docs/gate.md, "Calibration"); counters: 0 (exact)
DEFAULT_MODE = lockstep.SEQUENTIAL  # docs/gate.md, "Lockstep"


def add_arguments(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--base", metavar="REF", help="git ref of the base side")
    which.add_argument("--baseline", type=Path, metavar="FILE",
                       help="take the base commit from this baseline file's provenance"
                            " (falling back to --fallback-base when this clone lacks it)")
    p.add_argument("--fallback-base", default="HEAD~1", metavar="REF",
                   help="with --baseline: the base when the recorded commit is not in this"
                        " clone (default HEAD~1)")
    p.add_argument("--head", metavar="REF",
                   help="git ref of the head side; default: the working tree as it is")
    p.add_argument("--pairs", type=int, default=DEFAULT_PAIRS, metavar="N",
                   help=f"base/head pairs, order alternating (default {DEFAULT_PAIRS},"
                        f" at least {MIN_PAIRS})")
    p.add_argument("--tolerance", type=percent, default=DEFAULT_TOLERANCE, metavar="PCT",
                   help="how far a time may move the bad way (default 3%%)")
    p.add_argument("--counter-tolerance", type=percent, default=0.0, metavar="PCT",
                   help="how far a counter may move the bad way (default 0%%: exact)")
    p.add_argument("--figure", action="append", default=[], metavar="NAME",
                   help="a figure to gate, repeatable; default all: " + ", ".join(DEFAULT_FIGURES))
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="where the runs and ab.json go (default reports/ab/<timestamp>)")
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS, metavar="N",
                   help=f"torch threads of each run, pinned to as many of the last CPUs (default"
                        f" {DEFAULT_THREADS}; 0: torch's default, unpinned)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--lockstep", dest="mode", action="store_const", const=lockstep.LOCKSTEP,
                      help="run each pair's two runs at once on one CPU, their engine steps"
                           " taking turns (reference engine only; wall-clock figures left out)")
    mode.add_argument("--sequential", dest="mode", action="store_const",
                      const=lockstep.SEQUENTIAL,
                      help="run each pair's two runs one after the other (the default)")
    p.set_defaults(mode=DEFAULT_MODE)
    p.add_argument("--markdown", type=Path, metavar="FILE", help="also write the verdict as markdown")
    p.add_argument("--allow-invalid", action="store_true",
                   help="judge runs that failed their validity checks instead of failing")
    p.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                   help="llmperf overrides after --; default: " + " ".join(DEFAULT_BENCHMARK))


def percent(text: str) -> float:
    """'5%', '5' or '0.05'? Only the first two: a tolerance is written in percent."""
    value = text.strip().lstrip("+-").removesuffix("%")
    try:
        amount = float(value) / 100
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r} (write e.g. 5%)") from None
    if not 0 <= amount < 1:
        raise argparse.ArgumentTypeError(f"a tolerance must be in 0%..100%, got {text!r}")
    return amount


def run(args: argparse.Namespace) -> int:
    if args.threads < 0:
        raise GateError(f"--threads {args.threads} must be >= 0 (0: torch's default)")
    if args.pairs < MIN_PAIRS:
        raise GateError(f"--pairs {args.pairs}: the paired interval needs at least {MIN_PAIRS}")
    figures = chosen_figures(args.figure, args.mode)
    root = repo_root(Path.cwd())
    base_ref = args.base or base_from_baseline(root, args.baseline, args.fallback_base)
    base_commit = resolve_commit(root, base_ref)
    head_commit = resolve_commit(root, args.head) if args.head else None
    overrides = args.overrides or list(DEFAULT_BENCHMARK)
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    out = fresh_folder(args.out or Path("reports/ab") / stamp)
    with contextlib.ExitStack() as stack:
        stack.enter_context(terminated_as_exit())
        base_tree, head_tree = stack.enter_context(side_trees(root, base_commit, head_commit))
        base = Side("base", base_tree, base_commit, f"base {base_ref} ({base_commit[:12]})")
        head = head_side(root, head_tree, args.head, head_commit)
        print(f"A/B: {base.label} against {head.label}, {args.pairs} pairs, into {out}",
              flush=True)
        turns: list[dict] = []
        if args.mode == lockstep.LOCKSTEP:
            pairs, turns = lockstep.run_pairs(
                base, head, overrides, args.pairs, out, threads=args.threads,
                on_run=lambda i, side: print(f"  pair {i + 1}/{args.pairs}: base and head in"
                                             f" lockstep, {side.role} first", flush=True))
        else:
            pairs = run_pairs(base, head, overrides, args.pairs, out,
                              on_run=lambda i, side: print(f"  pair {i + 1}/{args.pairs}:"
                                                           f" {side.role}", flush=True),
                              threads=args.threads)
    results, text = judge_pairs(pairs, figures, args.tolerance, args.counter_tolerance,
                                base.label, head.label, mode_line(args.mode, args.threads, turns))
    invalid = [note for pair in pairs for job in pair for note in validity_notes(job)]
    invalid += lockstep.notes(turns)
    text += "".join(f"\n{'warning' if args.allow_invalid else 'FAIL'}: {n}" for n in invalid)
    print(text)
    write_outputs(out, args.markdown, results, text, base, head, args.mode, turns)
    figures = {f"ab.{r.figure.name}": median(r.head) for r in results}
    figures |= {f"ab.{r.figure.name}.change": r.point for r in results if r.figure.timed}
    write_figures(out / "figures.json", machine_facts(pairs[0][1]), figures)
    failed = any(r.is_regression for r in results) or (invalid and not args.allow_invalid)
    return 1 if failed else 0


def chosen_figures(names: Sequence[str], mode: str) -> list[Figure]:
    """The figures asked for, or all; in lockstep the wall-clock ones are refused or left out."""
    if mode == lockstep.LOCKSTEP:
        asked = [n for n in names if n in lockstep.WALL_CLOCK]
        if asked:
            raise GateError(f"{asked[0]} is read off the run's wall clock, which in lockstep holds"
                            f" the other side's steps too; judge it with --sequential")
        names = names or [n for n in DEFAULT_FIGURES if n not in lockstep.WALL_CLOCK]
    return [figure_named(n) for n in names or DEFAULT_FIGURES]


def mode_line(mode: str, threads: int, turns: Sequence[dict]) -> str:
    if mode != lockstep.LOCKSTEP:
        return "mode: sequential (each pair's runs one after the other, the order alternating)"
    steps = [r.get("turns", 0) for pair in turns for r in pair.values()]
    cpus = pin_cpus(threads)
    where = f"on CPU {','.join(map(str, sorted(cpus)))}" if cpus else "unpinned"
    return (f"mode: lockstep (each pair's runs at once {where}, their steps taking turns:"
            f" {min(steps, default=0)}-{max(steps, default=0)} turns a run;"
            f" {', '.join(lockstep.WALL_CLOCK)} left out)")


def base_from_baseline(root: Path, path: Path, fallback: str) -> str:
    """The commit the baseline was recorded at, or `fallback` (said on one line) if not here."""
    source = Baseline.load(path).source
    commit = (source.get("machine") or {}).get("git_commit") or source.get("git_commit")
    if not commit:
        raise GateError(f"baseline {path} records no commit; give --base REF")
    try:
        resolve_commit(root, commit)
    except GateError:
        print(f"warning: {path} was recorded at {commit[:12]}, which this clone lacks;"
              f" comparing against {fallback} instead", flush=True)
        return fallback
    return commit


def head_side(root: Path, tree: Path, ref: str | None, commit: str | None) -> Side:
    if ref is None:
        at = resolve_commit(root, "HEAD")[:12]
        changes = " + uncommitted changes" if dirty_files(root) else ""
        return Side("head", tree, None, f"head (working tree at {at}{changes})")
    return Side("head", tree, commit, f"head {ref} ({commit[:12]})")


def judge_pairs(pairs: Sequence[Pair], figures: list[Figure], tolerance: float,
                counter_tolerance: float, base_label: str, head_label: str,
                mode: str | None = None) -> tuple[list[ABResult], str]:
    """Verdicts for every figure and the console text: table, provenance, headline."""
    figures, notes = readable([job for pair in pairs for job in pair], figures)
    if not figures:
        raise GateError("no figure could be read from every run: " + "; ".join(notes))
    values = {side: [read_figures(pair[i], figures) for pair in pairs]
              for i, side in enumerate(("base", "head"))}
    results = [judge_figure(f, [v[f.name] for v in values["base"]],
                            [v[f.name] for v in values["head"]],
                            tolerance if f.timed else counter_tolerance) for f in figures]
    lines = table(results)
    lines += [f"warning: {note}" for note in notes]
    lines.append(f"base: {base_label}: {describe(machine_facts(pairs[0][0]))}")
    lines.append(f"head: {head_label}: {describe(machine_facts(pairs[0][1]))}")
    lines.append(f"times: Hodges-Lehmann change of the {len(pairs)} pairs' log-ratios,"
                 f" {CONFIDENCE:.0%} Wilcoxon signed-rank interval; counters: range over runs")
    if mode:
        lines.append(mode)
    lines.append(headline(results))
    return results, "\n".join(lines)


def table(results: Sequence[ABResult]) -> list[str]:
    rows = [["figure", "base", "head", "change", f"{CONFIDENCE:.0%} interval", "tolerance",
             "verdict"]]
    for r in results:
        rows.append([r.figure.name, _median_text(r.base), _median_text(r.head),
                     change_text(r.point), f"{change_text(r.low)} .. {change_text(r.high)}",
                     f"{r.tolerance * 100:g}%", "improved" if r.verdict == IMPROVED else r.verdict])
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    lines.insert(1, "-" * max(map(len, lines)))
    return lines


def headline(results: Sequence[ABResult]) -> str:
    bad = [r.figure.name for r in results if r.verdict == REGRESSION]
    if bad:
        return f"FAIL: {len(bad)} of {len(results)} figures regressed ({', '.join(bad)})"
    noisy = sum(r.verdict == WITHIN_NOISE for r in results)
    return f"PASS: no regression in {len(results)} figures" + (
        f"; {noisy} past tolerance but within noise" if noisy else "")


def _median_text(values: Sequence[float]) -> str:
    return f"{median(values):.4g}"


def write_outputs(out: Path, markdown: Path | None, results: Sequence[ABResult], text: str,
                  base: Side, head: Side, mode: str = lockstep.SEQUENTIAL,
                  turns: Sequence[dict] = ()) -> None:
    out.mkdir(parents=True, exist_ok=True)
    record = {"base": {"label": base.label, "commit": base.commit},
              "head": {"label": head.label, "commit": head.commit},
              "mode": mode, **({"turns": list(turns)} if turns else {}),
              "results": [r.to_dict() for r in results]}
    (out / "ab.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    if markdown is not None:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        mark = "❌" if any(r.is_regression for r in results) else "✅"
        markdown.write_text(f"### llmperf-gate ab {mark}\n\n```\n{text}\n```\n", encoding="utf-8")
