"""The bytes account (llmperf.perf.footprint) against the bytes the reference engine holds."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from engines.reference import ReferenceEngine
from engines.reference.build import build_rank_model
from engines.reference.config import ModelConfig
from engines.reference.presets import get_preset
from engines.reference.weights import build_meta_model, materialize, save_checkpoint
from llmperf.perf.footprint import footprint

PRECISIONS = ("fp32", "bf16", "fp16", "int8", "fp8")
CPU = torch.device("cpu")


def held_bytes(model: nn.Module) -> int:
    """Bytes of every parameter and persistent buffer, each tensor once (ties count once)."""
    tensors = {id(p): p for p in model.parameters()}
    for module in model.modules():
        for name, buf in module._buffers.items():
            if buf is not None and name not in module._non_persistent_buffers_set:
                tensors[id(buf)] = buf
    return sum(t.numel() * t.element_size() for t in tensors.values())


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Shapes that exercise each term: tied table with an odd vocabulary and q/k/v biases
    (Qwen2-like), and every bias Llama allows."""
    shapes = {
        "tied_qkv_bias_odd_vocab": ModelConfig(
            vocab_size=509, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
            attention_bias=True,
        ),
        "all_biases": ModelConfig(
            vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, attention_bias=True,
            attention_out_bias=True, mlp_bias=True,
        ),
    }  # fmt: skip
    paths = {"tiny": "tiny"}
    for name, cfg in shapes.items():
        path = tmp_path_factory.mktemp(name)
        save_checkpoint(materialize(build_meta_model(cfg, 64), None, torch.float32, CPU, 1), path)
        paths[name] = str(path)
    return paths


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("model", ["tiny", "tied_qkv_bias_odd_vocab", "all_biases"])
def test_weight_bytes_per_rank_are_what_each_rank_holds(checkpoints, model, precision):
    options = dict(
        model=checkpoints[model], attention="sdpa", precision=precision, max_model_len=64, seed=0
    )
    for tp in (1, 2):
        account = footprint(build_rank_model(options, 0, 1, CPU).config, precision, "cpu", tp)
        for rank in range(tp):
            built = build_rank_model(options, rank, tp, CPU)
            assert held_bytes(built.model) == account.weight_bytes_per_rank, (tp, rank)
            assert built.weight_bytes == account.weight_bytes_per_rank


def test_quantized_scales_follow_the_float_dtype_of_the_device():
    tiny = get_preset("tiny")
    linears, rows = 3_014_656, 4 * (256 + 2 * 64 + 256 + 2 * 768 + 256)
    tables, norms = 2 * 512, 9 * 256
    int8_gpu = linears + tables * 256 + (rows + tables + norms) * 2
    assert footprint(tiny, "int8", "cuda").weight_bytes == int8_gpu
    assert footprint(tiny, "fp8", "cuda").weight_bytes == int8_gpu  # fp8 codes are one byte too
    # fp8 computes in fp32 on a CPU: its scales and norms take 4 bytes there.
    assert footprint(tiny, "fp8", "cpu").weight_bytes == int8_gpu + (rows + tables + norms) * 2
    assert footprint(tiny, "fp8", "cpu").compute_dtype == "fp32"
    assert footprint(tiny, "fp8", "cuda").compute_dtype == "bf16"


def test_tensor_parallel_replicates_norms_and_row_parallel_outputs():
    tiny = get_preset("tiny")
    one, two = footprint(tiny, "int8", "cuda", 1), footprint(tiny, "int8", "cuda", 2)
    replicated = 9 * 256 * 2 + 4 * 2 * 256 * 2  # norms; o_proj and down_proj row scales
    assert two.weight_bytes == one.weight_bytes + replicated
    assert two.kv_bytes_per_token == one.kv_bytes_per_token == 2 * 4 * 64 * 2  # K and V, layers, kv_size, bf16
    assert two.kv_bytes_per_token_per_rank == one.kv_bytes_per_token / 2


def test_tp_must_shard_whole_heads_as_the_engine_does():
    with pytest.raises(ValueError, match=r"tp=3 must divide num_attention_heads \(8\) of tiny"):
        footprint(get_preset("tiny"), "bf16", tp=3)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_tp2_engine_reports_the_weight_bytes_of_every_rank(precision):
    """Defect a: with tp > 1 the engine reported rank 0's shard as the model's weight_bytes."""
    tiny = get_preset("tiny")
    account = footprint(tiny, precision, "cpu", 2)
    with ReferenceEngine(model="tiny", precision=precision, tp=2, max_model_len=64) as eng:
        info = eng.info()
        assert info["rank_weight_bytes"] == [account.weight_bytes_per_rank] * 2
        assert info["weight_bytes"] == account.weight_bytes
        assert info["kv_bytes_per_token"] == account.kv_bytes_per_token
        storage = eng.kv.storage
        slots = (eng.kv.num_blocks + 1) * eng.kv.block_size  # one scratch block
        assert storage.numel() * storage.element_size() == slots * account.kv_bytes_per_token_per_rank


@pytest.mark.parametrize(("precision", "kv_cache"), itertools.product(PRECISIONS, ["paged", "contiguous"]))
def test_kv_cache_holds_the_accounted_bytes_per_token(precision, kv_cache):
    eng = ReferenceEngine(
        model="tiny", precision=precision, kv_cache=kv_cache, max_model_len=64, max_num_seqs=2
    )
    account = footprint(get_preset("tiny"), precision, "cpu")
    storage = eng.kv.storage
    assert storage.numel() * storage.element_size() == (
        (eng.kv.num_blocks + 1) * eng.kv.block_size * account.kv_bytes_per_token
    )
    assert eng.info()["kv_bytes_per_token"] == account.kv_bytes_per_token
    assert eng.info()["weight_bytes"] == account.weight_bytes
