"""One rank's model, built as the options say, and the size of its KV cache.

The engine's own process builds rank 0 with it; with tensor parallelism each
other rank's process builds its slice the same way (engines/reference/tp_group.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engines.reference.attention import AttentionBackend, get_backend
from engines.reference.config import ModelConfig
from engines.reference.cpu_layout import optimize_cpu_layout
from engines.reference.cpu_malloc import apply_cpu_malloc
from engines.reference.fused_ops import install_fused_ops
from engines.reference.huge_pages import advise_weights
from engines.reference.kv_cache import blocks_for
from engines.reference.model import LlamaForCausalLM
from engines.reference.precision import Precision, get_precision, quantize_model, weight_bytes
from engines.reference.tp import local_config, shard_model
from engines.reference.weights import build_meta_model, materialize, resolve_model

CPU_KV_MEMORY_FRACTION = 0.25  # of available RAM, when num_kv_blocks is not given
GPU_MEMORY_UTILIZATION = 0.90  # weights + KV cache, of the GPU's total memory


@dataclass
class RankModel:
    """One rank's model: its slice of the weights, in its precision."""

    model: LlamaForCausalLM
    config: ModelConfig
    local_config: ModelConfig
    backend: AttentionBackend
    precision: Precision
    compute_dtype: torch.dtype
    weight_bytes: int
    checkpoint: Path | None


def build_rank_model(options: dict[str, Any], rank: int, world: int, device: torch.device) -> RankModel:
    backend = get_backend(options["attention"])
    precision = get_precision(options["precision"])
    config, checkpoint = resolve_model(options["model"])
    dtype = precision.compute_dtype(device)
    if device.type == "cpu":
        apply_cpu_malloc(options.get("cpu_malloc", "default"))  # before the weights: every rank's process
    model = materialize(build_meta_model(config, options["max_model_len"]), checkpoint, dtype, device, options["seed"])
    if world > 1:
        shard_model(model, rank, world)
    quantize_model(model, options["precision"])
    if options.get("compile"):
        # Traced once for every layer: weights are graph inputs, token counts dynamic, and the
        # attention call (model.attend) runs eager. Compiles lazily, on the first steps.
        model.forward = torch.compile(model.forward, dynamic=True)
    elif device.type == "cpu":
        # Opaque packed weights that inductor cannot trace; bf16 widened where the CPU lacks bf16.
        optimize_cpu_layout(model, options.get("cpu_bf16_matmul", "native"))
        if options.get("fused_ops"):
            install_fused_ops(model)
    if device.type == "cpu" and options.get("cpu_huge_pages") == "true":
        advise_weights(model)  # last: packing allocated the weights the model keeps
    return RankModel(
        model=model,
        config=config,
        local_config=local_config(config, world),
        backend=backend,
        precision=precision,
        compute_dtype=dtype,
        weight_bytes=weight_bytes(model),
        checkpoint=checkpoint,
    )



def default_num_kv_blocks(
    built: RankModel, max_model_len: int, block_size: int, max_num_seqs: int, device: torch.device
) -> int:
    """Room for max_num_seqs full-length sequences, capped by a memory budget."""
    bytes_per_element = torch.finfo(built.compute_dtype).bits // 8
    bytes_per_block = built.local_config.kv_bytes_per_token(bytes_per_element) * block_size
    wanted = max_num_seqs * blocks_for(max_model_len, block_size)
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        budget = total * GPU_MEMORY_UTILIZATION - torch.cuda.memory_allocated(device)  # the weights are in it
    else:
        import psutil

        budget = psutil.virtual_memory().available * CPU_KV_MEMORY_FRACTION
    return max(1, min(wanted, int(budget // bytes_per_block)))
