"""Tokenizers: the checkpoint's tokenizer.json when there is one, else bytes.

The byte-level fallback maps each UTF-8 byte b to id b + 3 (0-2 are left for
pad/bos/eos, as SentencePiece byte fallback does), so text prompts work with any
preset whose vocabulary has at least 259 entries.
"""

from __future__ import annotations

from pathlib import Path

BYTE_OFFSET = 3


class ByteTokenizer:
    def __init__(self, vocab_size: int, eos_token_ids: tuple[int, ...] = (2,)):
        if vocab_size < 256 + BYTE_OFFSET:
            raise ValueError(f"a byte tokenizer needs vocab_size >= {256 + BYTE_OFFSET}, got {vocab_size}")
        self.vocab_size = vocab_size
        self.eos_token_ids = tuple(eos_token_ids)

    def encode(self, text: str) -> list[int]:
        return [b + BYTE_OFFSET for b in text.encode("utf-8")]

    def decode(self, token_ids: list[int]) -> str:
        data = bytes(t - BYTE_OFFSET for t in token_ids if BYTE_OFFSET <= t < 256 + BYTE_OFFSET)
        return data.decode("utf-8", errors="replace")


class HFTokenizer:
    """A `tokenizer.json` read with the `tokenizers` library (no transformers needed).

    `vocab_size` is the model's (it may exceed the tokenizer's); None: the tokenizer's own.
    """

    def __init__(self, path: str | Path, vocab_size: int | None, eos_token_ids: tuple[int, ...]):
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(path))
        self.vocab_size = self._tok.get_vocab_size() if vocab_size is None else vocab_size
        self.eos_token_ids = tuple(eos_token_ids)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, token_ids: list[int]) -> str:
        return self._tok.decode(list(token_ids), skip_special_tokens=True)


def load_tokenizer(checkpoint_dir: str | Path | None, vocab_size: int, eos_token_ids: tuple[int, ...]):
    if checkpoint_dir is not None:
        tok_file = Path(checkpoint_dir) / "tokenizer.json"
        if tok_file.is_file():
            return HFTokenizer(tok_file, vocab_size, eos_token_ids)
    return ByteTokenizer(vocab_size, eos_token_ids)
