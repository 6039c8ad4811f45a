"""`llmperf-export`: write a preset as a Hugging Face checkpoint folder, or a preset or a
checkpoint folder as one GGUF file for llama.cpp.

    llmperf-export model=llama-107m out=checkpoints/llama-107m [seed=0] [force=true]
    llmperf-export format=gguf type=q8_0 model=llama-107m out=llama-107m-q8_0.gguf
    llmperf-export format=gguf model.path=checkpoints/llama-107m out=llama-107m-f16.gguf type=f16

A bad argument prints one line and exits 2.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from engines.reference.presets import preset_names
from llmperf.errors import UsageError
from llmperf.export.gguf_file import GGUF_TYPES

USAGE = """\
usage: llmperf-export model=PRESET out=DIR [seed=0] [force=false]
       llmperf-export format=gguf (model=PRESET | model.path=DIR) out=FILE.gguf [type=f32]

  model       a preset: {presets}
  model.path  a checkpoint folder (format=gguf only): config.json, safetensors, tokenizer.json
  out         format=hf: the folder to write, empty or absent unless force=true;
              format=gguf: the .gguf file, absent unless force=true
  format      hf (a Hugging Face checkpoint folder, the default) or gguf (llama.cpp's file)
  type        format=gguf: the weights' type: {types}
  seed        the weights' seed (the reference engine's seed for the same weights)
  force       write over what `out` holds
"""
KEYS = ("model", "model.path", "out", "format", "type", "seed", "force")
FORMATS = ("hf", "gguf")
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
    args.setdefault("format", "hf")
    if args["format"] not in FORMATS:
        raise UsageError(f"format={args['format']!r}: valid: {', '.join(FORMATS)}")
    if args["format"] == "gguf":
        args.setdefault("type", "f32")
        if args["type"] not in GGUF_TYPES:
            raise UsageError(f"type={args['type']!r}: valid: {', '.join(GGUF_TYPES)}")
        if ("model" in args) == ("model.path" in args):
            raise UsageError("format=gguf takes model=PRESET or model.path=DIR, one of them")
    else:
        for key in ("type", "model.path"):
            if key in args:
                raise UsageError(f"{key}= needs format=gguf (format=hf exports a preset)")
    if "out" not in args:
        raise UsageError("missing out=...; see llmperf-export --help")
    if "model" not in args and "model.path" not in args:
        raise UsageError("missing model=...; see llmperf-export --help")
    if "model" in args and args["model"] not in preset_names():
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
        print(USAGE.format(presets=", ".join(preset_names()), types=", ".join(GGUF_TYPES)))
        return 0
    from llmperf.export.checkpoint import export_checkpoint

    try:
        args = parse_args(argv)
        if args["format"] == "gguf":
            from llmperf.export.gguf_file import export_gguf

            exported = export_gguf(
                args["out"],
                preset=args.get("model"),
                checkpoint=args.get("model.path"),
                type=args["type"],
                seed=args["seed"],
                force=args["force"],
            )
        else:
            exported = export_checkpoint(args["model"], args["out"], args["seed"], args["force"])
    except (UsageError, ValueError, FileNotFoundError) as err:
        print(f"llmperf-export: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    if args["format"] == "gguf":
        print(
            f"{exported.name}: {exported.num_params / 1e6:.1f}M parameters, {exported.arch}, "
            f"{exported.type}, vocabulary {exported.vocab_size} "
            f"({exported.trained_tokens} trained), {exported.bytes / 1e6:.1f} MB in {exported.path}"
        )
        return 0
    print(
        f"{exported.preset}: {exported.num_params / 1e6:.1f}M parameters, vocabulary "
        f"{exported.vocab_size} ({exported.trained_tokens} trained), "
        f"{exported.bytes / 1e6:.1f} MB in {exported.path}"
    )
    return 0
