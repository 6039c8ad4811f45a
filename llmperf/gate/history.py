"""`llmperf-gate history`: a figure across commits, from a CSV kept in the repository.

    llmperf-gate history --append reports/ci/figures.json    # CI: one row per figure
    llmperf-gate history FIGURE [--out reports/history]      # FIGURE.png and FIGURE.html

reports/history.csv holds one row per (commit, figure): `date,commit,figure,value`. CI
appends the figures of each run of its benchmark stage (`figures.json`: {"commit", "date",
"figures": {name: value}}); a commit measured twice keeps both rows, both plotted.
"""

from __future__ import annotations

import argparse
import csv
import html
import json
import math
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg

from llmperf.gate.baseline import now_iso
from llmperf.gate.errors import GateError
from llmperf.measure.run_files import is_number
from llmperf.report.plotting import MUTED, color, new_figure, titled

DEFAULT_CSV = Path("reports/history.csv")
COLUMNS = ("date", "commit", "figure", "value")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("figure", nargs="?", metavar="FIGURE", help="the figure to plot")
    p.add_argument("--csv", type=Path, default=DEFAULT_CSV, metavar="FILE",
                   help=f"the history (default {DEFAULT_CSV})")
    p.add_argument("--append", type=Path, metavar="FIGURES_JSON",
                   help="append a figures.json's rows to the CSV instead of plotting")
    p.add_argument("--out", type=Path, default=Path("reports/history"), metavar="DIR",
                   help="where FIGURE.png and FIGURE.html go (default reports/history)")


def run(args: argparse.Namespace) -> int:
    if args.append is not None:
        rows = append(args.csv, args.append)
        print(f"appended {rows} rows to {args.csv}")
        return 0
    if not args.figure:
        raise GateError("give a FIGURE to plot, or --append FIGURES_JSON")
    points = read_history(args.csv, args.figure)
    png, page = plot(points, args.figure, args.out)
    print(f"{args.figure}: {len(points)} points over {len({p[1] for p in points})} commits;"
          f" wrote {png} and {page}")
    return 0


def write_figures(path: Path, facts: dict, figures: dict[str, float]) -> None:
    """figures.json for `--append`: the run's commit (and whether its tree was dirty), now."""
    record = {"commit": facts.get("git_commit"), "dirty": bool(facts.get("git_dirty")),
              "date": now_iso(), "figures": figures}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def append(csv_path: Path, figures_json: Path) -> int:
    try:
        data = json.loads(figures_json.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise GateError(f"{figures_json}: not valid JSON ({e.msg} at line {e.lineno})") from None
    figures = data.get("figures") if isinstance(data, dict) else None
    if not isinstance(figures, dict) or not data.get("commit"):
        raise GateError(f"{figures_json}: needs {{'commit': ..., 'date': ..., 'figures': {{...}}}}")
    if data.get("dirty"):
        raise GateError(f"{figures_json}: measured on a working tree with uncommitted changes;"
                        " history keeps committed code only")
    rows = [(data.get("date", ""), data["commit"], name, repr(float(value)))
            for name, value in figures.items() if is_number(value) and math.isfinite(value)]
    new = not csv_path.is_file()
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with csv_path.open("a", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(COLUMNS)
        writer.writerows(rows)
    return len(rows)


def read_history(csv_path: Path, figure: str) -> list[tuple[str, str, float]]:
    """(date, commit, value) rows of one figure, in file order (the order CI measured them)."""
    if not csv_path.is_file():
        raise GateError(f"history not found: {csv_path} (CI appends to it with --append)")
    with csv_path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or tuple(reader.fieldnames) != COLUMNS:
            raise GateError(f"{csv_path}: the header must be {','.join(COLUMNS)}")
        rows = list(reader)
    names = sorted({r["figure"] for r in rows})
    points = []
    for n, r in enumerate(rows, 2):
        if r["figure"] != figure:
            continue
        try:
            points.append((r["date"], r["commit"], float(r["value"])))
        except (TypeError, ValueError):
            raise GateError(f"{csv_path}:{n}: value {r['value']!r} is not a number") from None
    if not points:
        raise GateError(f"no figure {figure!r} in {csv_path}; it holds: {', '.join(names) or 'nothing'}")
    return points


def plot(points: list[tuple[str, str, float]], figure: str, out: Path) -> tuple[Path, Path]:
    commits: list[str] = []
    for _, commit, _ in points:
        if commit not in commits:
            commits.append(commit)
    xs = [commits.index(c) for _, c, _ in points]
    fig, (ax,) = new_figure(f"{figure} across commits")
    ax.plot(xs, [v for *_, v in points], "o", color=color(0), alpha=0.6)
    medians = [_median([v for _, c, v in points if c == commit]) for commit in commits]
    ax.plot(range(len(commits)), medians, "-", color=MUTED, label="median per commit")
    ax.set_xticks(range(len(commits)), [c[:8] for c in commits], rotation=45, ha="right",
                  fontsize=8)
    titled(ax, "", "commit (oldest first)", figure)
    out.mkdir(parents=True, exist_ok=True)
    png = out / f"{_slug(figure)}.png"
    FigureCanvasAgg(fig).print_png(png)
    page = out / f"{_slug(figure)}.html"
    cells = "\n".join(f"<tr><td>{html.escape(d)}</td><td><code>{html.escape(c[:12])}</code></td>"
                      f"<td>{v:.6g}</td></tr>" for d, c, v in reversed(points))
    page.write_text(
        f"<!doctype html>\n<html><head><meta charset='utf-8'><title>{html.escape(figure)}"
        f" history</title></head>\n<body style='font-family:sans-serif;max-width:1100px'>\n"
        f"<h1>{html.escape(figure)} across commits</h1>\n<img src='{png.name}' width='100%'>\n"
        f"<table><tr><th>date</th><th>commit</th><th>value</th></tr>\n{cells}\n</table>\n"
        f"</body></html>\n", encoding="utf-8")
    return png, page


def _median(values: list[float]) -> float:
    s = sorted(values)
    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2


def _slug(figure: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in figure)
