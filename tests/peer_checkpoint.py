"""A small Llama checkpoint folder for peer servers: seeded random weights saved by
transformers, and a byte-level BPE tokenizer trained here with `tokenizers` (no hub)."""

from __future__ import annotations

import random
from pathlib import Path


def write_bpe_tokenizer(out: Path, vocab_size: int, special: list[str]):
    """A byte-level BPE tokenizer trained on seeded random words, saved as out/tokenizer.json
    (and returned: a `tokenizers.Tokenizer`)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(8000)]
    corpus = [" ".join(rng.choice(words) for _ in range(60)) for _ in range(4000)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(out / "tokenizer.json"))
    return tok


def write_llama_checkpoint(out: Path, num_layers: int = 4, hidden: int = 256, vocab_size: int = 4096) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = write_bpe_tokenizer(out, vocab_size, special)
    fast = PreTrainedTokenizerFast(tokenizer_file=str(out / "tokenizer.json"), eos_token=special[0],
                                   bos_token=special[0], pad_token=special[0])
    fast.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    fast.save_pretrained(str(out))
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=hidden, intermediate_size=hidden * 3,
                         num_hidden_layers=num_layers, num_attention_heads=hidden // 64, num_key_value_heads=hidden // 128,
                         max_position_embeddings=2048, bos_token_id=0, eos_token_id=0, tie_word_embeddings=True)
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(str(out))
    return out
