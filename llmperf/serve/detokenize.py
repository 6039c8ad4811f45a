"""Incremental detokenization: the text each new token adds, in constant time per token.

Decoding a token alone can be wrong (a multi-byte character split over tokens,
a word-initial space a BPE tokenizer only renders in context), and decoding the
whole output every token is quadratic. As TGI and vLLM do, decode a short window
before the new tokens and emit what the new tokens add to it; hold the text back
while it ends in an incomplete character (U+FFFD).
"""

from __future__ import annotations

from engines.base import Tokenizer

REPLACEMENT_CHAR = "\ufffd"


class IncrementalDetokenizer:
    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.token_ids: list[int] = []
        self._prefix_offset = 0  # start of the context window
        self._read_offset = 0  # tokens before this are already emitted

    def add(self, token_ids: tuple[int, ...] | list[int]) -> str:
        """The text the new tokens add ("" while a character is incomplete)."""
        self.token_ids.extend(token_ids)
        decode = self.tokenizer.decode
        prefix_text = decode(self.token_ids[self._prefix_offset : self._read_offset])
        new_text = decode(self.token_ids[self._prefix_offset :])
        if len(new_text) > len(prefix_text) and not new_text.endswith(REPLACEMENT_CHAR):
            self._prefix_offset = self._read_offset
            self._read_offset = len(self.token_ids)
            return new_text[len(prefix_text) :]
        return ""

    def flush(self) -> str:
        """What is still held back, at the end of the output (a dangling partial character)."""
        prefix_text = self.tokenizer.decode(self.token_ids[self._prefix_offset : self._read_offset])
        new_text = self.tokenizer.decode(self.token_ids[self._prefix_offset :])
        self._prefix_offset = self._read_offset = len(self.token_ids)
        return new_text[len(prefix_text) :]
