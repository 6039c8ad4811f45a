"""The ranks of tensor parallelism: their processes, their process group and the step broadcast.

Rank 0 is the engine's own process: it schedules, and before each forward it
broadcasts the step's inputs (plain lists) to the other ranks, which run the
same forward in lockstep and take part in the all-reduces (engines/reference/tp.py
says how the model is cut).
"""

from __future__ import annotations

import os
import socket
from typing import Any

import torch
import torch.distributed as dist

from engines.reference.build import build_rank_model
from engines.reference.kv_cache.base import allocate_storage
from engines.reference.model_runner import ModelRunner


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
    device = rank_device(spec["device"], rank)
    if device.type == "cpu":
        torch.set_num_threads(threads_per_rank(world))
    init_group(rank, world, port, device)
    try:
        built = build_rank_model(spec, rank, world, device)
        dist.all_gather_object([None] * world, built.weight_bytes)
        storage = allocate_storage(built.local_config, spec["num_kv_blocks"], spec["kv_block_size"], built.compute_dtype, device,
                                   spec.get("cpu_huge_pages") == "true")
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
