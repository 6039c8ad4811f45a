"""Model presets: published shapes, weights drawn at random from a seed.

Performance depends on shapes, not on what the weights say, so a preset gives
real work (bytes read, FLOPs done) without any download. `tiny` is for tests.
"""

from __future__ import annotations

from engines.reference.config import ModelConfig
from llmperf.registry import Registry

_LLAMA3_ROPE_SCALING_8B = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
_LLAMA3_ROPE_SCALING_1B = {**_LLAMA3_ROPE_SCALING_8B, "factor": 32.0}
_LLAMA3 = dict(
    vocab_size=128256,
    rms_norm_eps=1e-5,
    rope_theta=500000.0,
    max_position_embeddings=131072,
    bos_token_id=128000,
    eos_token_ids=(128001, 128008, 128009),
)

_SMOLLM2_135M = dict(
    vocab_size=49152,
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    rms_norm_eps=1e-5,
    rope_theta=100000.0,
    max_position_embeddings=8192,
    tie_word_embeddings=True,
    bos_token_id=0,
    eos_token_ids=(0,),
)


PRESETS: Registry[dict] = Registry("model preset", {
    "tiny": dict(
        vocab_size=512,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_ids=(2,),
    ),
    "smollm2-135m": _SMOLLM2_135M,
    # smollm2-135m's layer stack with an 896-token vocabulary (106.7M parameters): a ~100M
    # checkpoint whose tokenizer llmperf-export trains in full from the shipped ShareGPT
    # sample, which yields 920 tokens. A real server loads it in minutes on a CPU.
    "llama-107m": {**_SMOLLM2_135M, "vocab_size": 896, "bos_token_id": 1, "eos_token_ids": (2,)},
    "qwen2.5-0.5b": dict(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        attention_bias=True,
        bos_token_id=151643,
        eos_token_ids=(151643, 151645),
    ),
    "llama-3.2-1b": dict(
        **_LLAMA3,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        tie_word_embeddings=True,
        rope_scaling=_LLAMA3_ROPE_SCALING_1B,
    ),
    "llama-3.2-3b": dict(
        **_LLAMA3,
        hidden_size=3072,
        intermediate_size=8192,
        num_hidden_layers=28,
        num_attention_heads=24,
        num_key_value_heads=8,
        head_dim=128,
        tie_word_embeddings=True,
        rope_scaling=_LLAMA3_ROPE_SCALING_1B,
    ),
    "llama-3.1-8b": dict(
        **_LLAMA3,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        rope_scaling=_LLAMA3_ROPE_SCALING_8B,
    ),
    "llama-3.1-70b": dict(
        **_LLAMA3,
        hidden_size=8192,
        intermediate_size=28672,
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
        rope_scaling=_LLAMA3_ROPE_SCALING_8B,
    ),
})

# Parameter counts as their model cards state them, with half a unit of the last
# digit given (the rounding); tests hold presets to these.
PUBLISHED_PARAMS: dict[str, tuple[float, float]] = {
    "smollm2-135m": (135e6, 0.5e6),
    "qwen2.5-0.5b": (0.49e9, 0.005e9),
    "llama-3.2-1b": (1.24e9, 0.005e9),
    "llama-3.2-3b": (3.21e9, 0.005e9),
    "llama-3.1-8b": (8.03e9, 0.005e9),
    "llama-3.1-70b": (70.6e9, 0.05e9),
}


def preset_names() -> list[str]:
    return list(PRESETS)


def get_preset(name: str) -> ModelConfig:
    return ModelConfig(**PRESETS.get(name), name=name)
