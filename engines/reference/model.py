"""A Llama-architecture decoder over a packed batch of sequences.

Module and parameter names mirror transformers' LlamaForCausalLM, except that
q/k/v and gate/up projections are stacked into one matmul each (`qkv_proj`,
`gate_up_proj`); engines.reference.weights maps checkpoint names both ways. The forward pass takes the tokens of
every sequence in the step packed into one dimension (no padding); the
attention backend finds each sequence's context in the KV cache through the
step's `AttentionMetadata`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engines.reference.attention import AttentionBackend, AttentionMetadata
from engines.reference.config import ModelConfig
from engines.reference.rope import RotaryEmbedding, apply_rotary


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # One fused op for x * rsqrt(mean(x^2) + eps) in fp32 (bitwise the same as spelled out).
        normed = F.rms_norm(x.float(), self.weight.shape, eps=self.eps)
        return self.weight * normed.to(x.dtype)

    def add_forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The residual add, then the norm: (norm(x + residual), x + residual)."""
        total = x + residual
        return self(total), total


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.scale = cfg.head_dim**-0.5
        self.q_size, self.kv_size = cfg.q_size, cfg.kv_size
        # q, k and v in one matmul: one read of the input, one larger GEMV.
        self.qkv_proj = nn.Linear(cfg.hidden_size, cfg.q_size + 2 * cfg.kv_size, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(cfg.q_size, cfg.hidden_size, bias=cfg.attention_out_bias)
        self.rotate = apply_rotary  # engine.fused_ops: one C++ op per tensor (engines.reference.fused_ops)
        self.store = store_kv  # engine.fused_ops: one C++ op for K and V

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],  # this step's cos, sin (RotaryEmbedding.tables)
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMetadata,
        backend: AttentionBackend,
    ) -> torch.Tensor:
        num_tokens = x.shape[0]
        q, k, v = self.qkv_proj(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.reshape(num_tokens, self.num_heads, self.head_dim)
        k = k.reshape(num_tokens, self.num_kv_heads, self.head_dim)
        v = v.reshape(num_tokens, self.num_kv_heads, self.head_dim)
        q, k = self.rotate(q, k, *rope)
        out = attend(q, k, v, k_cache, v_cache, meta, backend, self.scale, self.store)
        return self.o_proj(out.reshape(num_tokens, -1))


@torch.compiler.disable
def attend(q, k, v, k_cache, v_cache, meta: AttentionMetadata, backend: AttentionBackend, scale: float, store=None):
    """Store the new K/V, then attend. Left out of torch.compile (`engine.compile`): the backend
    reads the step's lengths as Python ints, on which a compiled graph would specialise. A
    backend with `reads_new_kv` also gets the new K/V, so that prompts with no cached context
    attend to them where they are instead of gathering them back from the cache."""
    (store or store_kv)(k_cache, v_cache, k, v, meta.slot_mapping)
    if getattr(backend, "reads_new_kv", False):
        return backend(q, k_cache, v_cache, meta, scale, new_kv=(k, v))
    return backend(q, k_cache, v_cache, meta, scale)


def store_kv(k_cache, v_cache, k, v, slot_mapping) -> None:
    """Write the new tokens' K and V to their cache slots (block * block_size + offset)."""
    num_kv_heads, head_dim = k_cache.shape[-2:]
    k_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, k.to(k_cache.dtype))
    v_cache.view(-1, num_kv_heads, head_dim).index_copy_(0, slot_mapping, v.to(v_cache.dtype))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h, i, bias = cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias
        self.gate_up_proj = nn.Linear(h, 2 * i, bias=bias)  # gate and up stacked
        self.down_proj = nn.Linear(i, h, bias=bias)
        self.act_mul = silu_and_mul  # engine.fused_ops: one C++ op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_mul(self.gate_up_proj(x)))


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, residual, rope, k_cache, v_cache, meta, backend):
        """(this layer's output before its residual add, the residual stream): the add is left
        to the next norm, one fused op with it (`add_forward`), as the post-attention add is.
        The first layer gets residual None: its input is the stream."""
        if residual is None:
            normed, residual = self.input_layernorm(x), x
        else:
            normed, residual = self.input_layernorm.add_forward(x, residual)
        h = self.self_attn(normed, rope, k_cache, v_cache, meta, backend)
        normed, residual = self.post_attention_layernorm.add_forward(h, residual)
        return self.mlp(normed), residual


class LlamaModel(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg: ModelConfig, max_positions: int):
        super().__init__()
        self.config = cfg
        self.max_positions = max_positions
        self.model = LlamaModel(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.rotary = RotaryEmbedding(cfg, max_positions)

    def reset_rotary(self) -> None:
        """Recompute the RoPE tables (after the model leaves the meta device)."""
        device = self.lm_head.weight.device
        self.rotary = RotaryEmbedding(self.config, self.max_positions).to(device)

    def forward(
        self,
        input_ids: torch.Tensor,  # [num_tokens]
        positions: torch.Tensor,  # [num_tokens]
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        meta: AttentionMetadata,
        backend: AttentionBackend,
        logits_indices: torch.Tensor | None = None,  # rows whose logits are wanted; None: all
    ) -> torch.Tensor:
        x = self.model.embed_tokens(input_ids)
        rope = self.rotary.tables(positions, x.dtype)
        residual = None
        for layer, (k_cache, v_cache) in zip(self.model.layers, kv_caches, strict=True):
            x, residual = layer(x, residual, rope, k_cache, v_cache, meta, backend)
        if logits_indices is not None and logits_indices.numel() != x.shape[0]:
            # The sampler's rows only (each sequence's last position): the final add, norm and LM head skip the rest.
            x, residual = x[logits_indices], residual[logits_indices]
        normed, _ = self.model.norm.add_forward(x, residual)
        return self.lm_head(normed).float()
