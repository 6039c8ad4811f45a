"""`llmperf-selfcheck --gpu [--only NAME,...]`: print the GPU self-check's figures as one JSON object.

Exits 0 whether or not a GPU is present (figures that could not run say why);
2 on a bad argument.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from llmperf.selfcheck.gpu import CHECKS, run_checks

EXIT_USAGE = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llmperf-selfcheck", description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true", help="run the GPU figures")
    parser.add_argument("--only", default="", help=f"comma-separated checks; valid: {', '.join(CHECKS)}")
    args = parser.parse_args(argv)
    if not args.gpu:
        print("llmperf-selfcheck: nothing to check; pass --gpu", file=sys.stderr)
        return EXIT_USAGE
    only = [name for name in args.only.split(",") if name]
    unknown = [name for name in only if name not in CHECKS]
    if unknown:
        print(f"llmperf-selfcheck: unknown check {unknown[0]!r}; valid: {', '.join(CHECKS)}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(run_checks(only or None), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
