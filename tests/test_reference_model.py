"""The reference model against transformers' LlamaForCausalLM, and its own invariants."""

from __future__ import annotations

import pytest
import torch
from hf_checkpoints import make_hf_llama

from engines.reference import ReferenceEngine
from engines.reference.config import ModelConfig

LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}

SHAPES = {
    "gqa1-untied-theta1e4": dict(num_attention_heads=4, num_key_value_heads=4),
    "gqa4-tied-theta5e5": dict(num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=True, rope_theta=5e5),
    "gqa8-llama3-scaling": dict(num_attention_heads=8, num_key_value_heads=1, rope_theta=5e5, rope_scaling=LLAMA3_SCALING),
    "explicit-head-dim": dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32),
    "attention-bias-v4-config": dict(num_attention_heads=4, num_key_value_heads=2, attention_bias=True, config_form="v4"),
    "linear-scaling-sharded": dict(
        num_attention_heads=4, num_key_value_heads=2, rope_scaling={"rope_type": "linear", "factor": 2.0}, max_shard_size="60KB"
    ),
}


@pytest.fixture(scope="module", params=list(SHAPES))
def pair(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    hf = make_hf_llama(path, **SHAPES[request.param])
    return hf, ReferenceEngine(model=str(path), attention="sdpa", precision="fp32", num_kv_blocks=64)


@pytest.mark.parametrize("length", [1, 7, 33])
def test_logits_match_transformers(pair, length):
    hf, eng = pair
    ids = torch.randint(3, hf.config.vocab_size, (length,), generator=torch.Generator().manual_seed(length))
    with torch.no_grad():
        expected = hf(ids[None]).logits[0].float()
    got = eng.logits(ids.tolist())
    assert got.shape == expected.shape
    assert (got - expected).abs().max().item() < 1e-4


def test_eager_attention_matches_transformers(tmp_path):
    hf = make_hf_llama(tmp_path, num_attention_heads=8, num_key_value_heads=2)
    eng = ReferenceEngine(model=str(tmp_path), attention="eager", num_kv_blocks=16)
    ids = list(range(5, 40))
    with torch.no_grad():
        expected = hf(torch.tensor([ids])).logits[0]
    assert (eng.logits(ids) - expected).abs().max().item() < 1e-4


def test_greedy_generate_matches_transformers_on_a_batch_of_mixed_lengths(tmp_path):
    hf = make_hf_llama(tmp_path, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=3)
    eng = ReferenceEngine(model=str(tmp_path), num_kv_blocks=64)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 320, (n,), generator=gen).tolist() for n in (3, 11, 26, 50)]
    outs = eng.generate(prompts, max_tokens=40, temperature=0.0)
    for prompt, out in zip(prompts, outs, strict=True):
        with torch.no_grad():
            ref = hf.generate(torch.tensor([prompt]), max_new_tokens=40, do_sample=False, eos_token_id=None, pad_token_id=0)
        assert out.token_ids == ref[0, len(prompt) :].tolist()
        assert out.finish_reason == "length"


def test_incremental_decode_equals_full_forward():
    eng = ReferenceEngine(model="tiny", num_kv_blocks=32)
    prompt = list(range(10, 30))
    out = eng.generate([prompt], max_tokens=24)[0]
    full = eng.logits(prompt + out.token_ids)
    # Greedy tokens read off one full forward are the ones the KV-cached decode produced.
    assert full[len(prompt) - 1 : -1].argmax(-1).tolist() == out.token_ids


def test_kv_cached_logits_equal_full_forward_logits():
    eng = ReferenceEngine(model="tiny", num_kv_blocks=32, batching="chunked", max_num_batched_tokens=8)
    prompt = list(range(40, 77))
    full = eng.logits(prompt)
    # Chunks of 8 tokens each read the earlier chunks from the cache; the last logits must agree.
    from engines.base import SamplingParams
    from engines.reference.scheduler import ScheduledSeq
    from engines.reference.sequence import Sequence

    seq = Sequence("s", prompt, 1, SamplingParams())
    eng.kv.admit(seq)
    rows = []
    while seq.num_computed_tokens < len(prompt):
        n = min(8, len(prompt) - seq.num_computed_tokens)
        assert eng.kv.grow(seq, seq.num_computed_tokens + n)
        logits, _ = eng.runner.run([ScheduledSeq(seq, n, True)], all_logits=True)
        rows.append(logits)
        seq.num_computed_tokens += n
    eng.kv.free(seq)
    assert (torch.cat(rows) - full).abs().max().item() < 1e-4


def test_generation_stops_at_eos(tmp_path):
    hf = make_hf_llama(tmp_path, num_attention_heads=4, num_key_value_heads=2)
    prompt = list(range(3, 12))
    with torch.no_grad():
        ref = hf.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
    eos = ref[0, len(prompt) + 4].item()  # the fifth generated token plays EOS
    cfg_file = tmp_path / "config.json"
    cfg_file.write_text(cfg_file.read_text().replace('"eos_token_id": null', f'"eos_token_id": {eos}'))
    eng = ReferenceEngine(model=str(tmp_path), num_kv_blocks=16)
    out = eng.generate([prompt], max_tokens=12)[0]
    first_eos = ref[0, len(prompt) :].tolist().index(eos)
    assert out.token_ids == ref[0, len(prompt) : len(prompt) + first_eos + 1].tolist()
    assert out.finish_reason == "stop"
    assert len(eng.generate([prompt], max_tokens=12, ignore_eos=True)[0].token_ids) == 12


def test_v4_and_v5_config_forms_parse_alike():
    v5 = {
        "model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
        "num_hidden_layers": 1, "num_attention_heads": 2,
        "rope_parameters": {"rope_theta": 5e5, **LLAMA3_SCALING},
    }
    v4 = {k: v for k, v in v5.items() if k != "rope_parameters"} | {"rope_theta": 5e5, "rope_scaling": LLAMA3_SCALING}
    a, b = ModelConfig.from_hf_dict(v5), ModelConfig.from_hf_dict(v4)
    assert a.rope_theta == b.rope_theta == 5e5
    assert a.rope_scaling == b.rope_scaling == LLAMA3_SCALING
    assert a.num_key_value_heads == 2 and a.head_dim == 4


def test_unsupported_checkpoint_is_refused_with_the_reason(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "gpt2", "vocab_size": 10}')
    with pytest.raises(ValueError, match="not a Llama-architecture"):
        ReferenceEngine(model=str(tmp_path))
    with pytest.raises(FileNotFoundError):
        ReferenceEngine(model="./no/such/folder")
    with pytest.raises(ValueError, match="valid: tiny"):
        ReferenceEngine(model="llama-9")


@pytest.mark.parametrize("tied", [False, True])
def test_saved_preset_loads_in_transformers_with_the_same_logits(tmp_path, tied):
    from transformers import AutoModelForCausalLM

    from engines.reference.presets import get_preset
    from engines.reference.weights import build_meta_model, materialize, save_checkpoint

    cfg = get_preset("tiny")
    cfg.tie_word_embeddings = tied
    model = materialize(build_meta_model(cfg, 256), None, torch.float32, torch.device("cpu"), seed=5)
    save_checkpoint(model, tmp_path)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = list(range(3, 40))
    with torch.no_grad():
        expected = hf(torch.tensor([ids])).logits[0]
    eng = ReferenceEngine(model=str(tmp_path))
    assert (eng.logits(ids) - expected).abs().max().item() < 1e-4
    with pytest.raises(ValueError, match="before quantization or CPU packing"):
        save_checkpoint(eng.model, tmp_path / "again")


def test_qwen_style_biases_round_trip_through_transformers(tmp_path):
    from transformers import AutoModelForCausalLM

    from engines.reference.config import ModelConfig
    from engines.reference.weights import build_meta_model, materialize, save_checkpoint

    cfg = ModelConfig(
        vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, attention_bias=True, tie_word_embeddings=True,
    )
    model = materialize(build_meta_model(cfg, 64), None, torch.float32, torch.device("cpu"), seed=1)
    save_checkpoint(model, tmp_path)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(hf).__name__ == "Qwen2ForCausalLM"
    eng = ReferenceEngine(model=str(tmp_path))
    ids = list(range(3, 30))
    with torch.no_grad():
        expected = hf(torch.tensor([ids])).logits[0]
    assert (eng.logits(ids) - expected).abs().max().item() < 1e-4
