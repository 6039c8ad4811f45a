"""`llmperf-export`: write a preset as a Hugging Face checkpoint folder.

    llmperf-export model=llama-107m out=checkpoints/llama-107m [seed=0] [force=true]

A bad argument prints one line and exits 2.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from engines.reference.presets import preset_names
from llmperf.errors import UsageError

USAGE = """\
usage: llmperf-export model=PRESET out=DIR [seed=0] [force=false]

  model   a preset: {presets}
  out     the folder to write; it must be empty or absent unless force=true
  seed    the weights' seed (the reference engine's seed for the same weights)
  force   write over a folder that holds files
"""
KEYS = ("model", "out", "seed", "force")
EXIT_USAGE = 2


def parse_args(argv: Sequence[str]) -> dict:
    args: dict = {"seed": 0, "force": False}
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or not value:
            raise UsageError(f"argument {arg!r} is not key=value; valid keys: {', '.join(KEYS)}")
        if key not in KEYS:
            raise UsageError(f"unknown argument {key!r}; valid: {', '.join(KEYS)}")
        args[key] = value
    for required in ("model", "out"):
        if required not in args:
            raise UsageError(f"missing {required}=...; see llmperf-export --help")
    if args["model"] not in preset_names():
        raise UsageError(
            f"model={args['model']!r}: no such preset; valid: {', '.join(preset_names())}"
        )
    try:
        args["seed"] = int(args["seed"])
    except ValueError:
        raise UsageError(f"seed={args['seed']!r}: not an integer") from None
    force = str(args["force"]).lower()
    if force not in ("true", "false"):
        raise UsageError(f"force={args['force']!r}: valid: true, false")
    args["force"] = force == "true"
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE.format(presets=", ".join(preset_names())))
        return 0
    from llmperf.export.checkpoint import export_checkpoint

    try:
        args = parse_args(argv)
        exported = export_checkpoint(args["model"], args["out"], args["seed"], args["force"])
    except (UsageError, ValueError) as err:
        print(f"llmperf-export: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    print(
        f"{exported.preset}: {exported.num_params / 1e6:.1f}M parameters, vocabulary "
        f"{exported.vocab_size} ({exported.trained_tokens} trained), "
        f"{exported.bytes / 1e6:.1f} MB in {exported.path}"
    )
    return 0
