"""A byte-level BPE tokenizer trained on text the project ships, saved as transformers reads it.

The ids the model's config names are fixed: <pad> 0, <s> 1 (bos), </s> 2 (eos). The
vocabulary is trained up to the model's size; when the shipped text yields fewer merges
(it yields 920 tokens), the rest are reserved special tokens, as Llama 3 reserves its
own, so the tokenizer's size always equals the model's `vocab_size`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import scenarios

PAD, BOS, EOS = "<pad>", "<s>", "</s>"
SPECIAL_TOKENS = (PAD, BOS, EOS)  # ids 0, 1, 2
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
CORPUS = Path(scenarios.__file__).parent / "data" / "sharegpt_sample.jsonl"

# Llama-3-like turns with the tokenizer's own markers; servers render it for /v1/chat/completions.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ message['role'] }}: {{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)


def corpus_texts(path: Path = CORPUS) -> Iterator[str]:
    """Every turn of a ShareGPT-format JSONL file."""
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                for turn in json.loads(line).get("conversations", ()):
                    yield turn["value"]


def train_tokenizer(vocab_size: int, corpus: Path = CORPUS):
    """A `tokenizers.Tokenizer` of exactly `vocab_size` entries."""
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    minimum = 256 + len(SPECIAL_TOKENS)
    if vocab_size < minimum:
        raise ValueError(f"a byte-level BPE needs vocab_size >= {minimum}, got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_texts(corpus), trainer)
    reserved = vocab_size - tok.get_vocab_size()
    if reserved > 0:
        start = tok.get_vocab_size()
        tok.add_special_tokens(
            [AddedToken(f"<|reserved_{start + i}|>", special=True) for i in range(reserved)]
        )
    # BOS first, as Llama's tokenizers add it (vLLM encodes text prompts with special tokens).
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, BOS_ID)]
    )
    return tok


def write_tokenizer(tok, out: Path, model_max_length: int) -> None:
    """tokenizer.json, tokenizer_config.json (with the chat template) and special_tokens_map.json."""
    tok.save(str(out / "tokenizer.json"))
    special = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
        "chat_template": CHAT_TEMPLATE,
    }
    _write_json(out / "tokenizer_config.json", config)
    _write_json(out / "special_tokens_map.json", special)


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
