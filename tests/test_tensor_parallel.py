"""Tensor parallelism on CPU (gloo): same greedy tokens as one rank, half the sharded weights each."""

from __future__ import annotations

import random

import pytest
import torch

from engines.reference import ReferenceEngine
from engines.reference.presets import get_preset
from engines.reference.tp import local_config


def prompts(n=6, seed=0):
    rng = random.Random(seed)
    return [[rng.randrange(3, 512) for _ in range(rng.randint(2, 40))] for _ in range(n)]


@pytest.mark.parametrize("batching", ["continuous", "chunked"])
def test_tp2_greedy_outputs_equal_tp1(batching):
    ps = prompts()
    one = ReferenceEngine(model="tiny", batching=batching, max_model_len=256)
    expected = [o.token_ids for o in one.generate(ps, max_tokens=16)]
    with ReferenceEngine(model="tiny", batching=batching, max_model_len=256, tp=2) as two:
        got = [o.token_ids for o in two.generate(ps, max_tokens=16)]
        full_logits = one.logits(ps[0])
        tp_logits = two.logits(ps[0])
    assert got == expected
    assert (full_logits - tp_logits).abs().max().item() < 1e-4


def test_each_rank_holds_half_of_the_sharded_weights():
    cfg = get_preset("tiny")
    h, L = cfg.hidden_size, cfg.num_hidden_layers
    norms = (2 * L + 1) * h * 4  # replicated on every rank
    sharded = cfg.num_params() * 4 - norms
    with ReferenceEngine(model="tiny", tp=2, max_model_len=128) as eng:
        assert eng.rank_weight_bytes == [sharded // 2 + norms] * 2
        layer = eng.model.model.layers[0]
        assert layer.self_attn.qkv_proj.weight.shape[0] == (cfg.q_size + 2 * cfg.kv_size) // 2
        assert layer.mlp.gate_up_proj.weight.shape[0] == cfg.intermediate_size
        assert eng.kv.storage.shape[-2] == cfg.num_key_value_heads // 2


def test_tp_must_divide_the_heads():
    with pytest.raises(ValueError, match="tp=3 must divide num_attention_heads"):
        local_config(get_preset("tiny"), 3)


def test_tied_embeddings_shard_and_count_once(tmp_path):
    from engines.reference.config import ModelConfig
    from engines.reference.weights import build_meta_model, materialize, save_checkpoint

    cfg = ModelConfig(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
    )
    save_checkpoint(materialize(build_meta_model(cfg, 128), None, torch.float32, torch.device("cpu"), 1), tmp_path)
    one = ReferenceEngine(model=str(tmp_path), max_model_len=64)
    expected = one.generate(prompts(3), max_tokens=8)
    with ReferenceEngine(model=str(tmp_path), max_model_len=64, tp=2) as two:
        assert [o.token_ids for o in two.generate(prompts(3), max_tokens=8)] == [o.token_ids for o in expected]
        norms = (2 * 2 + 1) * 128 * 4
        assert sum(two.rank_weight_bytes) == pytest.approx(one.weight_bytes + norms)
    assert one.weight_bytes == cfg.num_params() * 4
