"""Roofline: bytes and FLOPs per step, MBU/MFU per phase, the output tokens/s ceiling."""

from __future__ import annotations

import math

import pytest

from engines.base import StepStat
from engines.reference.presets import get_preset
from llmperf.hardware.profile import HardwareProfile
from llmperf.perf import roofline
from llmperf.perf.footprint import body_matmul_params

TINY = get_preset("tiny")  # h=256, i=768, 4 layers, 8 heads, 2 KV heads, head_dim 32, vocab 512
# Hand-computed from the shape: per layer q,k,v,o = 256*(256+64+64) + 256*256 and MLP 3*256*768.
TINY_BODY = 4 * (256 * 384 + 256 * 256 + 3 * 256 * 768)  # 3,014,656
TINY_LM_HEAD = 512 * 256
TINY_ATTN_PER_PAIR = 4 * 4 * 256  # 4 x layers x q_size
TINY_KV_FP32 = 2 * 4 * 2 * 32 * 4  # K and V x layers x kv heads x head_dim x 4 bytes = 2048
WEIGHTS = 1e7  # bytes; any figure: the roofline takes the engine's word for it


def profile(measured: bool = False) -> HardwareProfile:
    return HardwareProfile(
        name="test",
        kind="cpu",
        peak_mem_bw_bytes_per_s=1e11,
        peak_flops={"fp32": 1e12},
        measured_mem_bw_bytes_per_s=5e10 if measured else None,
        measured_flops={"fp32": 4e11} if measured else {},
    )


def step(kind, seqs, prefill, decode, context, duration, padded=0) -> StepStat:
    return StepStat(
        start_s=0.0,
        duration_s=duration,
        kind=kind,
        num_seqs=seqs,
        num_prefill_tokens=prefill,
        num_decode_tokens=decode,
        context_tokens=context,
        padded_tokens=padded,
    )


def naive_pairs(seqs: list[tuple[int, int]]) -> int:
    """(query, key) pairs by enumeration; each sequence is (earlier context, new tokens)."""
    return sum(1 for prior, new in seqs for q in range(new) for _k in range(prior + q + 1))


def test_body_matmul_params_match_the_hand_count_and_the_model_config():
    assert body_matmul_params(TINY) == TINY_BODY == 3_014_656
    norms = TINY.hidden_size * (2 * TINY.num_hidden_layers + 1)
    assert TINY_BODY == TINY.num_params(include_embeddings=False) - TINY_LM_HEAD - norms


@pytest.mark.parametrize(
    "seqs",
    [
        [(0, 17)],  # one prompt
        [(0, 9)] * 3,  # equal prompts batched
        [(40, 16)] * 2,  # prompt chunks after earlier chunks
        [(100, 1)] * 4,  # decode
    ],
)
def test_attention_pairs_equal_enumeration_for_equal_sequences(seqs):
    new = sum(n for _, n in seqs)
    context = sum(p + n for p, n in seqs)
    decode = new if all(n == 1 for _, n in seqs) else 0
    assert roofline.attention_pairs(len(seqs), new - decode, decode, context) == naive_pairs(seqs)


def test_attention_pairs_of_a_mixed_step_equal_enumeration_when_contexts_match():
    seqs = [(30, 1), (30, 1), (30, 1), (30, 12)]  # three decodes beside one prompt chunk
    assert roofline.attention_pairs(4, 12, 3, 4 * 30 + 15) == naive_pairs(seqs)


def test_decode_attention_pairs_are_exact_even_for_unequal_contexts():
    seqs = [(5, 1), (50, 1), (500, 1)]
    assert roofline.attention_pairs(3, 0, 3, 5 + 50 + 500 + 3) == naive_pairs(seqs)


def test_a_decode_step_reads_weights_once_plus_the_attended_kv():
    work = roofline.ModelWork.of(TINY, WEIGHTS, 4)
    w = roofline.step_work(work, step("decode", 4, 0, 4, 4 * 101, 0.01))
    assert work.kv_bytes_per_token == TINY_KV_FP32
    assert w.bytes_read == WEIGHTS + 404 * 2048
    assert w.bytes_written == 4 * 2048
    assert w.flops == 2 * TINY_BODY * 4 + 2 * TINY_LM_HEAD * 4 + TINY_ATTN_PER_PAIR * 404


def test_a_prefill_step_counts_causal_pairs_and_one_logits_row_per_sequence():
    work = roofline.ModelWork.of(TINY, WEIGHTS, 2)
    w = roofline.step_work(work, step("prefill", 1, 10, 0, 10, 0.01))
    assert w.bytes_read == WEIGHTS + 10 * 1024 and w.bytes_written == 10 * 1024
    assert w.flops == 2 * TINY_BODY * 10 + 2 * TINY_LM_HEAD + TINY_ATTN_PER_PAIR * 55


def test_padded_slots_add_no_work():
    work = roofline.ModelWork.of(TINY, WEIGHTS, 4)
    plain = roofline.step_work(work, step("decode", 2, 0, 2, 20, 0.01))
    padded = roofline.step_work(work, step("decode", 2, 0, 2, 20, 0.01, padded=6))
    assert plain == padded


def test_lower_bound_is_the_larger_of_memory_and_compute_time():
    b = roofline.lower_bound(roofline.StepWork(4e9, 0.0, 1e12), mem_bw=2e12, flops=1e15)
    assert (b.seconds, b.memory_s, b.compute_s, b.bound) == (2e-3, 2e-3, 1e-3, "memory")
    b = roofline.lower_bound(roofline.StepWork(4e9, 0.0, 1e13), mem_bw=2e12, flops=1e15)
    assert (b.seconds, b.bound) == (1e-2, "compute")
    assert (
        roofline.lower_bound(roofline.StepWork(4e9, 0.0, 1e13), mem_bw=2e12, flops=None).bound
        == "memory"
    )
    assert roofline.lower_bound(roofline.StepWork(4e9, 0.0, 1e13), None, None) is None


RUN_STEPS = [
    step("prefill", 2, 64, 0, 64, 0.020),
    step("decode", 2, 0, 2, 66, 0.004),
    step("decode", 2, 0, 2, 68, 0.005),
    step("mixed", 3, 16, 2, 84, 0.008),
    step("decode", 3, 0, 3, 91, 0.006),
]


def hand_work(s: StepStat) -> tuple[float, float]:
    """Bytes and FLOPs of RUN_STEPS written out with the formulas of the module docstring."""
    kv = TINY_KV_FP32
    pairs = {
        ("prefill", 64): 2 * (32 * 33 / 2),  # two 32-token prompts
        ("decode", 66): 66,
        ("decode", 68): 68,
        ("mixed", 84): 2 * (22 + 1)
        + 16 * 22
        + 16 * 17 / 2,  # earlier context 22 each; 16-token chunk
        ("decode", 91): 91,
    }[(s.kind, s.context_tokens)]
    tokens = s.num_prefill_tokens + s.num_decode_tokens
    bytes_ = WEIGHTS + s.context_tokens * kv + tokens * kv
    flops = 2 * TINY_BODY * tokens + 2 * TINY_LM_HEAD * s.num_seqs + TINY_ATTN_PER_PAIR * pairs
    return bytes_, flops


def test_roofline_summary_aggregates_each_phase_as_total_work_over_total_time():
    out = roofline.roofline_summary(
        RUN_STEPS, TINY, WEIGHTS, 4, profile(), "fp32", output_tokens=9, duration_s=0.1
    )
    for phase in ("prefill", "decode", "mixed"):
        mine = [s for s in RUN_STEPS if s.kind == phase]
        seconds = sum(s.duration_s for s in mine)
        total_bytes = sum(hand_work(s)[0] for s in mine)
        total_flops = sum(hand_work(s)[1] for s in mine)
        assert out[f"mbu_{phase}"] == pytest.approx(total_bytes / seconds / 1e11)
        assert out[f"mfu_{phase}"] == pytest.approx(total_flops / seconds / 1e12)
        assert out[f"achieved_bw_{phase}_bytes_per_s"] == pytest.approx(total_bytes / seconds)
    assert out["roofline_source"] == "steps" and out["roofline_peak_source"] == "datasheet"
    assert "mbu_decode_measured" not in out


def test_roofline_ceiling_is_output_tokens_over_the_sum_of_step_lower_bounds():
    out = roofline.roofline_summary(
        RUN_STEPS, TINY, WEIGHTS, 4, profile(), "fp32", output_tokens=9, duration_s=0.1
    )
    bound_s = sum(max(b / 1e11, f / 1e12) for b, f in map(hand_work, RUN_STEPS))
    assert out["roofline_output_tps"] == pytest.approx(9 / bound_s)
    assert out["roofline_fraction"] == pytest.approx((9 / 0.1) / (9 / bound_s))
    assert out["roofline_step_fraction"] == pytest.approx(
        bound_s / sum(s.duration_s for s in RUN_STEPS)
    )


def test_measured_peak_figures_sit_beside_the_datasheet_ones():
    out = roofline.roofline_summary(
        RUN_STEPS, TINY, WEIGHTS, 4, profile(measured=True), "fp32", output_tokens=9, duration_s=0.1
    )
    assert out["mbu_decode_measured"] == pytest.approx(out["mbu_decode"] * 1e11 / 5e10)
    assert out["mfu_prefill_measured"] == pytest.approx(out["mfu_prefill"] * 1e12 / 4e11)
    bound_s = sum(max(b / 5e10, f / 4e11) for b, f in map(hand_work, RUN_STEPS))
    assert out["roofline_output_tps_measured"] == pytest.approx(9 / bound_s)


def test_a_profile_without_flops_for_the_dtype_gives_null_mfu_and_a_bandwidth_only_ceiling():
    out = roofline.roofline_summary(
        RUN_STEPS, TINY, WEIGHTS, 4, profile(), "bf16", output_tokens=9, duration_s=0.1
    )
    assert out["mfu_decode"] is None and out["mbu_decode"] is not None
    bound_s = sum(b / 1e11 for b, _ in map(hand_work, RUN_STEPS))
    assert out["roofline_output_tps"] == pytest.approx(9 / bound_s)


def test_no_steps_gives_null_figures():
    out = roofline.roofline_summary(
        [], TINY, WEIGHTS, 4, profile(), "fp32", output_tokens=0, duration_s=1.0
    )
    assert out["roofline_source"] is None
    assert all(out[k] is None for k in roofline.SUMMARY_KEYS)


def test_run_level_estimate_uses_littles_law_for_the_decode_batch():
    out = roofline.estimate_summary(
        TINY,
        WEIGHTS,
        4,
        profile(),
        "fp32",
        output_tokens=4000,
        input_tokens=2000,
        num_requests=20,
        duration_s=10.0,
        tpot_s_mean=0.005,
    )
    batch = 400 * 0.005  # output tokens/s x TPOT = 2 sequences decoding at once
    context = 100 + 200 / 2  # mean prompt + half the mean output
    kv = TINY_KV_FP32
    step_bytes = WEIGHTS + batch * context * kv + batch * kv
    step_flops = batch * (2 * TINY_BODY + 2 * TINY_LM_HEAD) + TINY_ATTN_PER_PAIR * batch * context
    assert out["roofline_source"] == "estimate"
    assert out["mbu_decode"] == pytest.approx(step_bytes / 0.005 / 1e11)
    assert out["mfu_decode"] == pytest.approx(step_flops / 0.005 / 1e12)
    ceiling = batch / max(step_bytes / 1e11, step_flops / 1e12)
    assert out["roofline_output_tps"] == pytest.approx(ceiling)
    assert out["roofline_fraction"] == pytest.approx(400 / ceiling)
    assert out["mbu_prefill"] is None and out["mfu_prefill"] is None


def test_run_level_estimate_without_tpot_is_null():
    out = roofline.estimate_summary(
        TINY,
        WEIGHTS,
        4,
        profile(),
        "fp32",
        output_tokens=10,
        input_tokens=10,
        num_requests=10,
        duration_s=1.0,
        tpot_s_mean=None,
    )
    assert out["roofline_source"] is None and out["mbu_decode"] is None


def test_llama_8b_bf16_decode_at_batch_1_on_h200_is_bound_near_299_tokens_per_s():
    from llmperf.hardware.registry import load_profile

    model = get_preset("llama-3.1-8b")
    work = roofline.ModelWork.of(model, model.num_params() * 2, 2)
    b = roofline.lower_bound(
        roofline.decode_work(work, 1, 1), load_profile("h200").mem_bw(), 989.4e12
    )
    assert b.bound == "memory"
    assert 1 / b.seconds == pytest.approx(4.8e12 / 16.06e9, rel=1e-3)
    assert math.isclose(1 / b.seconds, 299, rel_tol=0.01)


def test_each_phase_gets_its_own_bound_against_its_own_time():
    out = roofline.roofline_summary(
        RUN_STEPS, TINY, WEIGHTS, 4, profile(measured=True), "fp32", output_tokens=9, duration_s=0.1
    )
    for phase in ("prefill", "decode", "mixed"):
        mine = [s for s in RUN_STEPS if s.kind == phase]
        seconds = sum(s.duration_s for s in mine)
        bound_s = sum(max(b / 1e11, f / 1e12) for b, f in map(hand_work, mine))
        measured_s = sum(max(b / 5e10, f / 4e11) for b, f in map(hand_work, mine))
        assert out[f"step_count_{phase}"] == len(mine)
        assert out[f"step_time_{phase}_s"] == pytest.approx(seconds)
        assert out[f"roofline_bound_{phase}_s"] == pytest.approx(bound_s)
        assert out[f"roofline_step_fraction_{phase}"] == pytest.approx(bound_s / seconds)
        assert out[f"roofline_step_fraction_{phase}_measured"] == pytest.approx(measured_s / seconds)
    # the phases' bounds add up to the whole run's
    total = sum(out[f"roofline_bound_{p}_s"] for p in ("prefill", "decode", "mixed"))
    assert out["roofline_step_fraction"] == pytest.approx(total / sum(s.duration_s for s in RUN_STEPS))
