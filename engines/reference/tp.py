"""Tensor parallelism over torch.distributed (Megatron-style), gloo on CPU, NCCL on GPU.

Each rank holds a slice of every layer: q/k/v and gate/up projections are split
by output rows (column-parallel: whole heads, whole MLP channels), o_proj and
down_proj by input columns (row-parallel: partial sums, all-reduced), the
embedding and LM head by vocabulary rows. The KV cache of a rank holds its own
KV heads only.

The ranks' processes and their process group live in
engines/reference/tp_group.py.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist
from torch import nn

from engines.reference.config import ModelConfig
from engines.reference.model import Attention, LlamaForCausalLM


def local_config(cfg: ModelConfig, world: int) -> ModelConfig:
    """The shapes one rank holds."""
    if world == 1:
        return cfg
    for name in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
        if getattr(cfg, name) % world:
            raise ValueError(f"tp={world} must divide {name} ({getattr(cfg, name)}) of {cfg.name}")
    return dataclasses.replace(
        cfg,
        num_attention_heads=cfg.num_attention_heads // world,
        num_key_value_heads=cfg.num_key_value_heads // world,
        intermediate_size=cfg.intermediate_size // world,
    )


class RowParallelLinear(nn.Module):
    """A linear whose input is split across ranks: local partial sums, then an all-reduce."""

    def __init__(self, inner: nn.Linear, bias: torch.Tensor | None):
        super().__init__()
        self.inner = inner
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.inner(x)
        dist.all_reduce(y)
        return y if self.bias is None else y + self.bias


class VocabParallelEmbedding(nn.Module):
    """Rows [start, end) of the table: ids outside it look up zeros, an all-reduce fills them.

    The rows are an `nn.Embedding` of their own, so quantizing the model swaps
    them for a quantized table as it does the embedding of one rank.
    """

    def __init__(self, weight: torch.Tensor, start: int):
        super().__init__()
        self.table = nn.Embedding(*weight.shape, device=weight.device, dtype=weight.dtype)
        self.table.weight = nn.Parameter(weight, requires_grad=False)
        self.start = start

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.start
        outside = (local < 0) | (local >= self.table.num_embeddings)
        out = self.table(local.masked_fill(outside, 0))
        out = out.masked_fill(outside[:, None], 0.0)
        dist.all_reduce(out)
        return out


class VocabParallelHead(nn.Module):
    """LM head rows for a slice of the vocabulary; the slices are gathered into full logits."""

    def __init__(self, inner: nn.Module, world: int):
        super().__init__()
        self.inner = inner
        self.world = world

    @property
    def weight(self) -> torch.Tensor:
        return self.inner.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        local = self.inner(x).contiguous()
        parts = [torch.empty_like(local) for _ in range(self.world)]
        dist.all_gather(parts, local)
        return torch.cat(parts, dim=-1)


def _rows(w: torch.Tensor, spans: list[tuple[int, int]]) -> torch.Tensor:
    return torch.cat([w[a:b] for a, b in spans]).contiguous()


@torch.no_grad()
def shard_model(model: LlamaForCausalLM, rank: int, world: int) -> None:
    """Cut the full model down to rank `rank`'s slice, in place."""
    cfg = model.config
    local = local_config(cfg, world)
    q, kv, i = local.q_size, local.kv_size, local.intermediate_size
    for layer in model.model.layers:
        attn: Attention = layer.self_attn
        spans = [
            (rank * q, (rank + 1) * q),
            (cfg.q_size + rank * kv, cfg.q_size + (rank + 1) * kv),
            (cfg.q_size + cfg.kv_size + rank * kv, cfg.q_size + cfg.kv_size + (rank + 1) * kv),
        ]
        _slice_linear_rows(attn.qkv_proj, spans)
        attn.num_heads, attn.num_kv_heads = local.num_attention_heads, local.num_key_value_heads
        attn.q_size, attn.kv_size = q, kv
        attn.o_proj = _row_parallel(attn.o_proj, rank * q, (rank + 1) * q)
        mlp = layer.mlp
        _slice_linear_rows(mlp.gate_up_proj, [(rank * i, (rank + 1) * i), (cfg.intermediate_size + rank * i, cfg.intermediate_size + (rank + 1) * i)])
        mlp.down_proj = _row_parallel(mlp.down_proj, rank * i, (rank + 1) * i)
    if cfg.vocab_size % world == 0:
        v = cfg.vocab_size // world
        span = (rank * v, (rank + 1) * v)
        tied = cfg.tie_word_embeddings
        table = _rows(model.model.embed_tokens.weight, [span])
        model.model.embed_tokens = VocabParallelEmbedding(table, span[0])
        head = nn.Linear(cfg.hidden_size, v, bias=False, device=table.device, dtype=table.dtype)
        head.weight = model.model.embed_tokens.table.weight if tied else nn.Parameter(_rows(model.lm_head.weight, [span]), requires_grad=False)
        model.lm_head = VocabParallelHead(head, world)


def _slice_linear_rows(linear: nn.Linear, spans: list[tuple[int, int]]) -> None:
    linear.weight = nn.Parameter(_rows(linear.weight, spans), requires_grad=False)
    if linear.bias is not None:
        linear.bias = nn.Parameter(_rows(linear.bias, spans), requires_grad=False)
    linear.out_features = linear.weight.shape[0]


def _row_parallel(linear: nn.Linear, start: int, end: int) -> RowParallelLinear:
    inner = nn.Linear(end - start, linear.out_features, bias=False, device=linear.weight.device, dtype=linear.weight.dtype)
    inner.weight = nn.Parameter(linear.weight[:, start:end].contiguous(), requires_grad=False)
    return RowParallelLinear(inner, None if linear.bias is None else linear.bias.detach().clone())
