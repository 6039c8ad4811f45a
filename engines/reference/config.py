"""Model shape: a Llama-architecture decoder, parsed from a Hugging Face config.json.

Accepts both key forms transformers has used: v4 (`rope_theta`, `rope_scaling`)
and v5 (`rope_parameters` holding `rope_theta` and the scaling fields).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")
SUPPORTED_ROPE_TYPES = ("default", "llama3", "linear")


@dataclass
class ModelConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int | None = None  # defaults to hidden_size // num_attention_heads
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None  # {"rope_type": "llama3", "factor": ...}
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # q/k/v biases (Llama's flag, and Qwen2)
    attention_out_bias: bool = False  # o_proj bias (Llama's attention_bias sets both; Qwen2 has none)
    mlp_bias: bool = False
    bos_token_id: int | None = 1
    eos_token_ids: tuple[int, ...] = (2,)
    initializer_range: float = 0.02
    name: str = "custom"

    def __post_init__(self) -> None:
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        rope_type = (self.rope_scaling or {}).get("rope_type", "default")
        if rope_type not in SUPPORTED_ROPE_TYPES:
            raise ValueError(
                f"rope_type {rope_type!r} is not supported; valid: {', '.join(SUPPORTED_ROPE_TYPES)}"
            )
        self.eos_token_ids = tuple(self.eos_token_ids)

    # -- shape arithmetic (used by the roofline and the planner) -------------------

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    def num_params(self, include_embeddings: bool = True) -> int:
        h, i, v = self.hidden_size, self.intermediate_size, self.vocab_size
        attn = h * (self.q_size + 2 * self.kv_size) + self.q_size * h
        if self.attention_bias:
            attn += self.q_size + 2 * self.kv_size
        if self.attention_out_bias:
            attn += h
        mlp = 3 * h * i + (2 * i + h if self.mlp_bias else 0)
        per_layer = attn + mlp + 2 * h  # two RMSNorm weights
        total = self.num_hidden_layers * per_layer + h  # final norm
        if include_embeddings:
            total += v * h * (1 if self.tie_word_embeddings else 2)
        elif not self.tie_word_embeddings:
            total += v * h  # the LM head is a matmul every token pays for
        return total

    def kv_bytes_per_token(self, bytes_per_element: float) -> float:
        """K and V for every layer: 2 x layers x kv_heads x head_dim x bytes."""
        return 2 * self.num_hidden_layers * self.kv_size * bytes_per_element

    # -- (de)serialization -------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["eos_token_ids"] = list(self.eos_token_ids)
        return d

    def to_hf_dict(self) -> dict[str, Any]:
        """A transformers config dict (v4 key form, which v5 also reads).

        Llama's `attention_bias` covers q/k/v and o_proj; biases on q/k/v alone are Qwen2's.
        """
        qwen2 = self.attention_bias and not self.attention_out_bias
        return {
            "architectures": ["Qwen2ForCausalLM" if qwen2 else "LlamaForCausalLM"],
            "model_type": "qwen2" if qwen2 else "llama",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": self.attention_bias,
            "mlp_bias": self.mlp_bias,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": list(self.eos_token_ids),
            "hidden_act": "silu",
            "initializer_range": self.initializer_range,
        }

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any], name: str = "custom") -> ModelConfig:
        model_type = d.get("model_type", "llama")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(
                f"model_type {model_type!r} is not a Llama-architecture decoder; "
                f"valid: {', '.join(SUPPORTED_MODEL_TYPES)}"
            )
        if d.get("hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act {d['hidden_act']!r} is not supported; valid: silu")
        rope_params = dict(d.get("rope_parameters") or {})
        rope_theta = rope_params.pop("rope_theta", None) or d.get("rope_theta", 10000.0)
        scaling = rope_params or d.get("rope_scaling") or None
        if scaling is not None:
            scaling = dict(scaling)
            scaling.setdefault("rope_type", scaling.pop("type", "default"))
            if scaling["rope_type"] == "default":
                scaling = None
        eos = d.get("eos_token_id", 2)
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        return cls(
            vocab_size=d["vocab_size"],
            hidden_size=d["hidden_size"],
            intermediate_size=d["intermediate_size"],
            num_hidden_layers=d["num_hidden_layers"],
            num_attention_heads=d["num_attention_heads"],
            num_key_value_heads=d.get("num_key_value_heads") or d["num_attention_heads"],
            head_dim=d.get("head_dim"),
            rms_norm_eps=d.get("rms_norm_eps", 1e-6),
            rope_theta=float(rope_theta),
            rope_scaling=scaling,
            max_position_embeddings=d.get("max_position_embeddings", 2048),
            tie_word_embeddings=d.get("tie_word_embeddings", False),
            attention_bias=d.get("attention_bias", model_type == "qwen2"),
            attention_out_bias=model_type != "qwen2" and d.get("attention_bias", False),
            mlp_bias=d.get("mlp_bias", False),
            bos_token_id=d.get("bos_token_id"),
            eos_token_ids=eos_ids,
            initializer_range=d.get("initializer_range", 0.02),
            name=name,
        )

    @classmethod
    def from_path(cls, path: str | Path) -> ModelConfig:
        path = Path(path)
        cfg_file = path / "config.json"
        if not cfg_file.is_file():
            raise FileNotFoundError(f"no config.json in checkpoint folder {path}")
        with cfg_file.open() as f:
            return cls.from_hf_dict(json.load(f), name=path.name)
