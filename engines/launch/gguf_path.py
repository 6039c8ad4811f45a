"""The GGUF file llama.cpp serves for a checkpoint folder, so that one `model.path` serves every
family of a sweep (`engine.launch=vllm,llama.cpp,llmperf-serve model.path=DIR`): vLLM and
llmperf-serve load the folder, llama.cpp the file this finds or writes.

A `.gguf` path is served as it is. For a folder: `DIR/gguf/<DIR's name>-<type>.gguf`, where
type follows config.json's `torch_dtype` (float32: f32; float16 or bfloat16: f16, the nearest
type llama.cpp's loader and llmperf-export share), so that every family computes in the
checkpoint's own precision. The file is written by `llmperf-export format=gguf` (run as a command) on first
use (a few seconds for llama-107m) and written again when `model.safetensors` is newer. It sits
in a subfolder, where neither vLLM nor llmperf-serve looks for weights.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

GGUF_FOLDER = "gguf"
TYPE_OF_DTYPE = {"float32": "f32", "float16": "f16", "bfloat16": "f16"}
EXPORT_TIMEOUT_S = 600  # a 70B checkpoint's f16 GGUF takes minutes


class GGUFError(ValueError):
    """The folder cannot be served as GGUF; the message is one line (ManagedServer.start
    makes it a LaunchError)."""


def gguf_type(folder: Path) -> str:
    """The GGUF weight type for the checkpoint's torch_dtype (f32 when it names none)."""
    try:
        dtype = json.loads((folder / "config.json").read_text()).get("torch_dtype") or "float32"
    except (OSError, ValueError) as err:
        raise GGUFError(f"model.path={str(folder)!r}: cannot read config.json ({err})") from None
    if dtype not in TYPE_OF_DTYPE:
        raise GGUFError(
            f"model.path={str(folder)!r}: torch_dtype {dtype!r} has no GGUF type here; "
            f"valid: {', '.join(TYPE_OF_DTYPE)}"
        )
    return TYPE_OF_DTYPE[dtype]


def gguf_file(folder: str | Path) -> Path:
    """Where the folder's GGUF goes (whether or not it is there yet)."""
    folder = Path(folder).expanduser()
    return folder / GGUF_FOLDER / f"{folder.resolve().name}-{gguf_type(folder)}.gguf"


def gguf_for(model: str) -> str:
    """The GGUF to serve for `model`: the file itself, or the folder's (written if missing or
    older than its weights). Anything else (a preset name) is returned unchanged."""
    path = Path(model).expanduser()
    if not path.is_dir():
        return model
    if not (path / "config.json").is_file():
        raise GGUFError(f"model.path={model!r} is a folder without config.json, not a checkpoint")
    out = gguf_file(path)
    weights = [p for p in path.glob("*.safetensors") if p.is_file()]
    newest = max((p.stat().st_mtime for p in weights), default=0.0)
    if out.is_file() and out.stat().st_mtime >= newest:
        return str(out)
    # The export is a command (a layer above the engines): run it as one, as a user would.
    command = [sys.executable, "-m", "llmperf.export", "format=gguf", f"model.path={path}",
               f"out={out}", f"type={out.stem.rsplit('-', 1)[1]}", "force=true"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S)
    if done.returncode != 0:
        lines = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()
        raise GGUFError(f"cannot write {out} for llama.cpp: {lines[-1]}")
    return str(out)
