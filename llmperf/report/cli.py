"""`llmperf-report PATH...`: rebuild the report of a run folder or of a sweep folder, or compare
several run folders on one page. Exit 0 on success, 2 on bad input (one line, no traceback)."""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Sequence
from pathlib import Path

from llmperf.report.errors import ReportError
from llmperf.report.folder import is_run_folder, is_sweep_folder

EXIT_USAGE = 2
COMPARISONS_DIR = Path("reports") / "comparisons"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="llmperf-report",
                description="Rebuild the HTML report of a run or sweep folder, or compare"
                            " several run folders side by side.")
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH",
                   help="a run folder (report.html in it), a sweep folder (sweep.csv and"
                        " report.html in it), or several run folders (a comparison page)")
    p.add_argument("-o", "--out", type=Path, metavar="DIR",
                   help="where a comparison of several runs goes"
                        f" (default: {COMPARISONS_DIR}/<date>_<time>)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        report = build(args.paths, args.out)
    except (ReportError, OSError) as e:  # OSError: an unreadable folder, an unwritable file
        print(f"llmperf-report: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(f"report: {report}")
    return 0


def kind_of(path: Path) -> str:
    """"run" or "sweep"; ReportError naming the path otherwise."""
    if not path.exists():
        raise ReportError(f"{path}: no such folder")
    if not path.is_dir():
        raise ReportError(f"{path}: not a folder; give a run or sweep folder")
    if is_run_folder(path):
        return "run"
    if is_sweep_folder(path):
        return "sweep"
    raise ReportError(f"{path}: neither a run folder (summary.json or requests.jsonl) nor a"
                      " sweep folder (multirun.yaml, or two run subfolders or more)")


def build(paths: list[Path], out: Path | None) -> Path:
    kinds = [kind_of(p) for p in paths]
    if len(paths) == 1:
        if out is not None:
            raise ReportError("--out is for comparisons of several runs; a run or sweep report"
                              " is written in its own folder")
        if kinds[0] == "run":
            from llmperf.report.run import build_run_report

            return build_run_report(paths[0])
        from llmperf.report.sweep import build_sweep_report

        return build_sweep_report(paths[0])
    sweeps = [str(p) for p, k in zip(paths, kinds, strict=True) if k == "sweep"]
    if sweeps:
        raise ReportError(f"{sweeps[0]} is a sweep folder; compare run folders (a sweep's jobs),"
                          " or give the sweep folder alone")
    from llmperf.report.compare import build_comparison_report

    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    return build_comparison_report(paths, out or COMPARISONS_DIR / stamp)
