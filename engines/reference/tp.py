"""Tensor parallelism over torch.distributed (Megatron-style), gloo on CPU, NCCL on GPU.

Each rank holds a slice of every layer: q/k/v and gate/up projections are split
by output rows (column-parallel: whole heads, whole MLP channels), o_proj and
down_proj by input columns (row-parallel: partial sums, all-reduced), the
embedding and LM head by vocabulary rows. The KV cache of a rank holds its own
KV heads only.

Rank 0 is the engine's own process: it schedules, and before each forward it
broadcasts the step's inputs (plain lists) to the other ranks, which run the
same forward in lockstep and take part in the all-reduces.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
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
    """Rows [start, end) of the table: ids outside it look up zeros, an all-reduce fills them."""

    def __init__(self, weight: torch.Tensor, start: int):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.start = start

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.start
        outside = (local < 0) | (local >= self.weight.shape[0])
        out = F.embedding(local.masked_fill(outside, 0), self.weight)
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
        head.weight = model.model.embed_tokens.weight if tied else nn.Parameter(_rows(model.lm_head.weight, [span]), requires_grad=False)
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


# -- process group -------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_group(rank: int, world: int, port: int, device: torch.device) -> None:
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)


def rank_device(device: str, rank: int) -> torch.device:
    d = torch.device(device)
    return torch.device("cuda", rank) if d.type == "cuda" else d


def threads_per_rank(world: int) -> int:
    return max(1, (os.cpu_count() or 1) // world)


def broadcast_step(inputs: Any) -> None:
    dist.broadcast_object_list([inputs], src=0)


def spawn_workers(world: int, port: int, spec: dict[str, Any]) -> list:
    ctx = torch.multiprocessing.get_context("spawn")
    procs = []
    for rank in range(1, world):
        p = ctx.Process(target=worker_main, args=(rank, world, port, spec), daemon=True, name=f"tp-rank-{rank}")
        p.start()
        procs.append(p)
    return procs


def worker_main(rank: int, world: int, port: int, spec: dict[str, Any]) -> None:
    """A non-scheduling rank: build this rank's slice, then run every broadcast step."""
    from engines.reference.build import build_rank_model
    from engines.reference.kv_cache.base import allocate_storage
    from engines.reference.model_runner import ModelRunner

    device = rank_device(spec["device"], rank)
    if device.type == "cpu":
        torch.set_num_threads(threads_per_rank(world))
    init_group(rank, world, port, device)
    try:
        built = build_rank_model(spec, rank, world, device)
        dist.all_gather_object([None] * world, built.weight_bytes)
        storage = allocate_storage(built.local_config, spec["num_kv_blocks"], spec["kv_block_size"], built.compute_dtype, device)
        kv_layers = [(storage[i, 0], storage[i, 1]) for i in range(built.config.num_hidden_layers)]
        runner = ModelRunner(built.model, kv_layers, spec["kv_block_size"], built.backend, device)
        while True:
            box = [None]
            dist.broadcast_object_list(box, src=0)
            if box[0] is None:
                return
            runner.execute(box[0])
    finally:
        dist.destroy_process_group()
