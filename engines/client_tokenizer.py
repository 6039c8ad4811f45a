"""The tokenizer an HTTP client counts with: the server's tokenizer.json when the user names it,
else UTF-8 bytes (ids 3..258), so prompts are built and unreported counts are made locally."""

from __future__ import annotations

import json
from pathlib import Path

from engines.base import Tokenizer
from engines.reference.tokenizer import BYTE_OFFSET, ByteTokenizer, HFTokenizer


def load_client_tokenizer(path: str | None) -> Tokenizer:
    """A tokenizer.json (a file, or a folder holding one); None: bytes as ids 3..258."""
    if path is None:
        return ByteTokenizer(256 + BYTE_OFFSET)
    file = Path(path).expanduser()
    if file.is_dir():
        file = file / "tokenizer.json"
    if not file.is_file():
        raise FileNotFoundError(f"tokenizer {path!r}: no tokenizer.json there")
    return HFTokenizer(file, None, _eos_token_ids(file.parent))


def _eos_token_ids(folder: Path) -> tuple[int, ...]:
    config = folder / "config.json"
    if not config.is_file():
        return ()
    eos = json.loads(config.read_text(encoding="utf-8")).get("eos_token_id")
    return tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
