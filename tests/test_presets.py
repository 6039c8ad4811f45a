"""Model presets: published shapes, lazy at any size, seeded weights."""

from __future__ import annotations

import pytest
import torch

from engines.reference import ReferenceEngine
from engines.reference.presets import PRESETS, PUBLISHED_PARAMS, get_preset
from engines.reference.weights import build_meta_model


@pytest.mark.parametrize("name", list(PUBLISHED_PARAMS))
def test_preset_parameter_count_matches_the_published_figure(name):
    cfg = get_preset(name)
    published, half_ulp = PUBLISHED_PARAMS[name]
    # A model card's figure is rounded: the exact count lies within half a unit of its last digit.
    assert abs(cfg.num_params() - published) <= half_ulp


def test_headline_counts():
    assert round(get_preset("llama-3.1-8b").num_params() / 1e9, 2) == 8.03
    assert round(get_preset("llama-3.1-70b").num_params() / 1e9, 1) == 70.6
    assert round(get_preset("llama-3.2-1b").num_params() / 1e9, 2) == 1.24
    assert 0.4e9 < get_preset("qwen2.5-0.5b").num_params() < 0.6e9
    assert 1e6 < get_preset("tiny").num_params() < 10e6


@pytest.mark.parametrize("name", list(PRESETS))
def test_meta_model_of_any_size_allocates_nothing_and_counts_like_the_config(name):
    model = build_meta_model(get_preset(name), max_positions=128)
    params = {id(p): p for p in model.parameters()}
    assert all(p.device.type == "meta" for p in params.values())
    assert sum(p.numel() for p in params.values()) == get_preset(name).num_params()


def test_kv_bytes_per_token_of_llama_70b_is_320_kib():
    assert get_preset("llama-3.1-70b").kv_bytes_per_token(2) == 80 * 8 * 128 * 2 * 2 == 320 * 1024


def test_same_seed_same_weights_other_seed_other_weights():
    a = ReferenceEngine(model="tiny", seed=3).logits([5, 6, 7])
    b = ReferenceEngine(model="tiny", seed=3).logits([5, 6, 7])
    c = ReferenceEngine(model="tiny", seed=4).logits([5, 6, 7])
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


def test_random_presets_have_decisive_greedy_choices():
    """The top two logits are far apart compared with float32 rounding, so batching cannot flip them."""
    logits = ReferenceEngine(model="tiny").logits(list(range(3, 200)))
    top2 = logits.topk(2, dim=-1).values
    gap = (top2[:, 0] - top2[:, 1]).abs()
    assert gap.median().item() > 0.1
