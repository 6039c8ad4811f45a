"""The tokenizer of a GGUF file (llmperf/export/gguf_file.py writes the rest): a checkpoint
folder's tokenizer.json read, its pre-tokenizer named as llama.cpp knows it, and the
vocabulary, merges and special tokens written as GGUF metadata."""

from __future__ import annotations

import json
from pathlib import Path

# The pre-tokenizer regexes llama.cpp knows by name (src/llama-vocab.cpp).
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def folder_tokenizer(folder: Path, cfg) -> tuple[dict, dict]:
    file = folder / "tokenizer.json"
    if not file.is_file():
        raise ValueError(
            f"no tokenizer.json in {folder}: format=gguf puts the tokenizer in the file"
        )
    tokenizer = json.loads(file.read_text(encoding="utf-8"))
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
    hf = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    pad = hf.get("pad_token_id")
    template = config.get("chat_template")
    add_bos = config.get("add_bos_token")
    if add_bos is None:  # what the post-processor prepends says it
        add_bos = cfg.bos_token_id is not None and str(cfg.bos_token_id) in json.dumps(
            (tokenizer.get("post_processor") or {}).get("special_tokens", {})
        )
    return tokenizer, {
        "bos": cfg.bos_token_id,
        "eos": cfg.eos_token_ids[0] if cfg.eos_token_ids else None,
        "pad": pad if isinstance(pad, int) else None,
        "add_bos": bool(add_bos),
        "chat_template": template if isinstance(template, str) else None,
    }


def tokenizer_pre(tokenizer: dict) -> str:
    """llama.cpp's name for a tokenizer.json's pre-tokenizer; ValueError for one it lacks."""
    pre = tokenizer.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    if tokenizer.get("normalizer"):
        raise ValueError(
            "format=gguf: a tokenizer with a normalizer is not a byte-level BPE llama.cpp reads"
        )
    if len(steps) == 1 and steps[0].get("type") == "ByteLevel" and steps[0].get("use_regex", True):
        if steps[0].get("add_prefix_space"):
            raise ValueError(
                "format=gguf: ByteLevel(add_prefix_space=true) has no llama.cpp pre-tokenizer"
            )
        return "gpt-2"
    if (
        len(steps) == 2
        and steps[0].get("type") == "Split"
        and steps[0].get("pattern", {}).get("Regex") == LLAMA3_REGEX
        and steps[1].get("type") == "ByteLevel"
        and not steps[1].get("use_regex", True)
    ):
        return "llama-bpe"
    raise ValueError(
        f"format=gguf: pre-tokenizer {json.dumps(pre)[:120]} is none llama.cpp knows by name "
        "(valid: ByteLevel with GPT-2's regex, Llama 3's Split + ByteLevel)"
    )


def gguf_vocab(gguf, tokenizer: dict, vocab_size: int) -> dict:
    """tokens, token types, merges and the pre-tokenizer's name, `vocab_size` entries."""
    model = tokenizer.get("model") or {}
    if model.get("type") != "BPE":
        raise ValueError(f"format=gguf writes a BPE tokenizer, this one is {model.get('type')!r}")
    pre = tokenizer_pre(tokenizer)
    by_id: dict[int, str] = {i: t for t, i in model["vocab"].items()}
    added = {a["id"]: a for a in tokenizer.get("added_tokens", [])}
    for i, a in added.items():
        by_id[i] = a["content"]
    if by_id and max(by_id) >= vocab_size:
        raise ValueError(
            f"the tokenizer has id {max(by_id)}, beyond the model's vocab_size {vocab_size}"
        )
    kind = gguf.TokenType
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(kind.UNUSED)
        elif i in added:
            tokens.append(by_id[i])
            types.append(kind.CONTROL if added[i].get("special") else kind.USER_DEFINED)
        else:
            tokens.append(by_id[i])
            types.append(kind.NORMAL)
    trained = sum(1 for i, t in by_id.items() if not t.startswith("<|reserved_"))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return {"tokens": tokens, "types": types, "merges": merges, "pre": pre, "trained": trained}


def write_tokenizer(gguf, writer, vocab: dict, special: dict) -> None:
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(vocab["pre"])
    writer.add_token_list(vocab["tokens"])
    writer.add_token_types(vocab["types"])
    writer.add_token_merges(vocab["merges"])
    if special["bos"] is not None:
        writer.add_bos_token_id(special["bos"])
    if special["eos"] is not None:
        writer.add_eos_token_id(special["eos"])
    if special["pad"] is not None:
        writer.add_pad_token_id(special["pad"])
    writer.add_add_bos_token(bool(special["add_bos"]))
    writer.add_add_eos_token(False)
    if special["chat_template"]:
        writer.add_chat_template(special["chat_template"])
