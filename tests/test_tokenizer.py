"""Tokenizers: the checkpoint's tokenizer.json, or the byte-level fallback."""

from __future__ import annotations

import pytest
from hf_checkpoints import make_hf_llama

from engines.reference import ReferenceEngine
from engines.reference.tokenizer import ByteTokenizer, HFTokenizer, load_tokenizer


def test_byte_tokenizer_round_trips_any_text():
    tok = ByteTokenizer(512, (2,))
    text = "héllo, wörld — ☃"
    ids = tok.encode(text)
    assert len(ids) == len(text.encode())
    assert all(3 <= i < 259 for i in ids)
    assert tok.decode(ids) == text
    assert tok.decode([0, 1, 2, 400] + ids) == text  # non-byte ids are skipped


def test_byte_tokenizer_needs_room_for_bytes():
    with pytest.raises(ValueError, match="vocab_size"):
        ByteTokenizer(100)


def _write_word_level_tokenizer(path):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, "the": 3, "cat": 4, "sat": 5, "on": 6, "mat": 7}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(path / "tokenizer.json"))


def test_checkpoint_tokenizer_json_is_used_when_present(tmp_path):
    make_hf_llama(tmp_path, vocab_size=320)
    _write_word_level_tokenizer(tmp_path)
    tok = load_tokenizer(tmp_path, 320, (2,))
    assert isinstance(tok, HFTokenizer)
    assert tok.encode("the cat sat on the mat") == [3, 4, 5, 6, 3, 7]
    eng = ReferenceEngine(model=str(tmp_path), num_kv_blocks=8)
    out = eng.generate(["the cat sat"], max_tokens=4)[0]
    assert out.prompt_token_ids == [3, 4, 5]
    assert len(out.token_ids) == 4 and isinstance(out.text, str)


def test_text_prompts_work_on_presets_through_the_byte_fallback():
    eng = ReferenceEngine(model="tiny")
    assert isinstance(eng.tokenizer, ByteTokenizer)
    out = eng.generate(["Hello"], max_tokens=5)[0]
    assert out.prompt_token_ids == [ord(c) + 3 for c in "Hello"]
    assert len(out.token_ids) == 5
