"""Write a preset or a Hugging Face checkpoint folder as one GGUF file that llama.cpp's
`llama-server` loads: the weights (f32, f16 or q8_0), the hyper-parameters under llama.cpp's
keys, and the tokenizer (a byte-level BPE, `tokenizer.ggml.model=gpt2`).

Written with the `gguf` package (the `llama` extra), following llama.cpp's own converter
(`convert_hf_to_gguf.py` / `conversion/llama.py` in its tree) for the Llama family:

- tensor names `token_embd`, `blk.N.attn_norm`, `blk.N.attn_q` ... `blk.N.ffn_down`,
  `output_norm`, `output` (left out when the embeddings are tied: llama.cpp then uses
  `token_embd`);
- Q and K rows permuted from transformers' rotate-half rope layout to llama.cpp's
  interleaved pairs (the converter's `permute`); a qwen2-shaped model (q/k/v biases only)
  is written as `qwen2`, whose rope is transformers' layout, unpermuted;
- 1-D tensors (norms, biases) stay f32; f16 and q8_0 apply to the 2-D weights (q8_0 falls
  back to f16 for a row length not divisible by 32, as the converter does);
- Llama 3's rope scaling as a `rope_freqs` tensor; linear scaling as its keys.

The tokenizer: tokens in their byte-level form, token types (control for special tokens),
merges, bos/eos/pad ids, whether bos is added, and the chat template. The pre-tokenizer is
named for llama.cpp (`tokenizer.ggml.pre`): `gpt-2` for the GPT-2 regex (llmperf-export's
tokenizer), `llama-bpe` for Llama 3's; any other is refused rather than guessed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmperf.errors import require
from llmperf.export.gguf_tokenizer import folder_tokenizer, gguf_vocab, write_tokenizer

GGUF_TYPES = ("f32", "f16", "q8_0")
QK8_0 = 32  # q8_0's block: 32 weights and one f16 scale


# transformers' per-layer names -> llama.cpp's (after `model.layers.N.`)
LAYER_TENSORS = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
GLOBAL_TENSORS = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


@dataclass
class ExportedGGUF:
    path: Path
    name: str
    arch: str
    type: str
    num_params: int
    vocab_size: int
    trained_tokens: int
    bytes: int


def _gguf():
    return require("gguf", "llama", "llmperf-export format=gguf")


def export_gguf(
    out: str | Path,
    preset: str | None = None,
    checkpoint: str | Path | None = None,
    type: str = "f32",
    seed: int = 0,
    force: bool = False,
) -> ExportedGGUF:
    """One GGUF file at `out` from a preset (its seeded weights, as `llmperf-export` writes
    them) or a checkpoint folder. ValueError for a bad type, an existing `out` (unless
    `force`), an unknown preset, or a model or tokenizer llama.cpp's Llama loader cannot
    take; MissingDependency without the `gguf` package."""
    if type not in GGUF_TYPES:
        raise ValueError(f"type={type!r}: valid: {', '.join(GGUF_TYPES)}")
    if (preset is None) == (checkpoint is None):
        raise ValueError("give a preset (model=) or a checkpoint folder (model.path=), not both")
    out = Path(out).expanduser()
    if out.suffix != ".gguf":
        raise ValueError(f"out={str(out)!r}: format=gguf writes one file, out=PATH.gguf")
    if out.is_dir():
        raise ValueError(f"out={str(out)!r} is a folder, not a .gguf file")
    if out.exists() and not force:
        raise ValueError(f"out={str(out)!r} exists; pass force=true to write over it")
    gguf = _gguf()
    if preset is not None:
        from engines.reference.weights import hf_state_dict
        from llmperf.export.checkpoint import preset_model
        from llmperf.export.tokenizer import CHAT_TEMPLATE, PAD_ID

        cfg, tok, model = preset_model(preset, seed)
        tokenizer = json.loads(tok.to_str())
        tensors: Iterator[tuple[str, Any]] = iter(hf_state_dict(model).items())
        special = {
            "bos": cfg.bos_token_id,
            "eos": cfg.eos_token_ids[0],
            "pad": PAD_ID,
            "add_bos": True,
            "chat_template": CHAT_TEMPLATE,
        }
        name = preset
    else:
        from engines.reference.config import ModelConfig

        folder = Path(checkpoint).expanduser()
        if not folder.is_dir():
            raise ValueError(f"model.path={str(checkpoint)!r} is not a folder")
        cfg = ModelConfig.from_path(folder)
        tokenizer, special = folder_tokenizer(folder, cfg)
        tensors = _folder_tensors(folder)
        name = folder.name

    vocab = gguf_vocab(gguf, tokenizer, cfg.vocab_size)
    arch = "qwen2" if cfg.attention_bias and not cfg.attention_out_bias else "llama"
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    writer = gguf.GGUFWriter(str(partial), arch)
    try:
        _write_hparams(gguf, writer, cfg, name, type)
        write_tokenizer(gguf, writer, vocab, special)
        num_params = _write_tensors(gguf, writer, cfg, arch, tensors, type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    except BaseException:
        writer.close()
        partial.unlink(missing_ok=True)
        raise
    writer.close()
    partial.replace(out)
    return ExportedGGUF(
        path=out,
        name=name,
        arch=arch,
        type=type,
        num_params=num_params,
        vocab_size=len(vocab["tokens"]),
        trained_tokens=vocab["trained"],
        bytes=out.stat().st_size,
    )


# -- hyper-parameters -------------------------------------------------------------------------


FILE_TYPES = {"f32": "ALL_F32", "f16": "MOSTLY_F16", "q8_0": "MOSTLY_Q8_0"}


def _write_hparams(gguf, writer, cfg, name: str, type: str) -> None:
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(name)
    writer.add_file_type(getattr(gguf.LlamaFileType, FILE_TYPES[type]))
    if type == "q8_0":
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_vocab_size(cfg.vocab_size)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_freq_base(float(cfg.rope_theta))
    writer.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    writer.add_rope_dimension_count(cfg.head_dim)
    if cfg.head_dim * cfg.num_attention_heads != cfg.hidden_size:
        writer.add_key_length(cfg.head_dim)
        writer.add_value_length(cfg.head_dim)
    scaling = cfg.rope_scaling or {}
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(scaling["factor"]))
    elif rope_type not in ("default", "llama3"):
        raise ValueError(
            f"rope_scaling type {rope_type!r}: format=gguf writes default, linear, llama3"
        )


def llama3_rope_factors(cfg) -> list[float]:
    """Llama 3's per-frequency rope factors, as llama.cpp's converter computes them."""
    scaling = cfg.rope_scaling
    dim = cfg.head_dim
    factor = scaling.get("factor", 8.0)
    low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
    old_context = scaling.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old_context / low, old_context / high
    factors = []
    for i in range(0, dim, 2):
        freq = 1.0 / (cfg.rope_theta ** (i / dim))
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (old_context / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return factors


# -- tensors ----------------------------------------------------------------------------------


def gguf_tensor_name(hf_name: str) -> str | None:
    """transformers' tensor name -> llama.cpp's; None for one llama.cpp does not keep."""
    if hf_name in GLOBAL_TENSORS:
        return GLOBAL_TENSORS[hf_name]
    if "rotary_emb" in hf_name:
        return None
    parts = hf_name.split(".")
    if parts[:2] == ["model", "layers"] and len(parts) >= 5:
        layer, suffix = parts[2], parts[-1]
        mapped = LAYER_TENSORS.get(".".join(parts[3:-1]))
        if mapped is not None:
            return f"blk.{layer}.{mapped}.{suffix}"
    raise ValueError(f"checkpoint tensor {hf_name!r} has no place in llama.cpp's Llama layout")


def permute_rope(weights, n_head: int):
    """transformers' rotate-half Q/K rows -> llama.cpp's interleaved pairs (per head, the
    first and second halves of its rows interleaved), as llama.cpp's converter writes them."""
    shape = weights.shape
    return (
        weights.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:])
        .swapaxes(1, 2)
        .reshape(shape)
    )


def unpermute_rope(weights, n_head: int):
    """The inverse of `permute_rope`: llama.cpp's Q/K rows back in transformers' layout."""
    shape = weights.shape
    return (
        weights.reshape(n_head, shape[0] // n_head // 2, 2, *shape[1:])
        .swapaxes(1, 2)
        .reshape(shape)
    )


def tensor_type(gguf, name: str, shape: tuple[int, ...], type: str):
    """The GGML type a tensor is stored in, for the file's `type`."""
    q = gguf.GGMLQuantizationType
    if len(shape) <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight"):
        return q.F32
    if type == "f16":
        return q.F16
    if type == "q8_0":
        return q.Q8_0 if shape[-1] % QK8_0 == 0 else q.F16
    return q.F32


def _write_tensors(gguf, writer, cfg, arch: str, tensors, type: str) -> int:
    import numpy as np

    count = 0
    if (cfg.rope_scaling or {}).get("rope_type") == "llama3":
        writer.add_tensor("rope_freqs.weight", np.asarray(llama3_rope_factors(cfg), np.float32))
    named = [(gguf_tensor_name(hf_name), tensor) for hf_name, tensor in tensors]
    # one order whatever the source's: llama.cpp's converter's (embeddings, layers, head)
    named.sort(key=lambda item: _tensor_order(item[0] or ""))
    for name, tensor in named:
        if name is None:
            continue
        if name == "output.weight" and cfg.tie_word_embeddings:
            continue  # llama.cpp reads the tied head from token_embd
        data = tensor.detach().float().cpu().numpy() if hasattr(tensor, "detach") else tensor
        data = np.ascontiguousarray(data, dtype=np.float32)
        if arch == "llama" and ".attn_q." in name:
            data = permute_rope(data, cfg.num_attention_heads)
        elif arch == "llama" and ".attn_k." in name:
            data = permute_rope(data, cfg.num_key_value_heads)
        count += data.size
        qtype = tensor_type(gguf, name, data.shape, type)
        if qtype == gguf.GGMLQuantizationType.F32:
            writer.add_tensor(name, data)
        elif qtype == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(name, data.astype(np.float16))
        else:
            writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    return count


def _tensor_order(name: str) -> tuple:
    parts = name.split(".")
    if parts[0] == "blk":
        short = ".".join(parts[2:-1])
        kinds = list(LAYER_TENSORS.values())
        return (1, int(parts[1]), kinds.index(short) if short in kinds else len(kinds), name)
    return ({"token_embd": 0, "output_norm": 2, "output": 3}.get(parts[0], 4), 0, 0, name)


def _folder_tensors(folder: Path):
    from safetensors import safe_open

    from engines.reference.weights import checkpoint_files

    for file in checkpoint_files(folder):
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)
