"""The capacity planner `llmperf-plan`: memory, devices, batch, latency and cost."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from engines.reference.presets import get_preset
from llmperf.hardware.profile import HardwareProfile
from llmperf.hardware.registry import load_profile
from llmperf.perf import cli
from llmperf.perf.footprint import body_matmul_params, footprint
from llmperf.perf.latency import predict_latency
from llmperf.perf.planner import (
    KV_OVERHEAD_FRACTION,
    RUNTIME_RESERVE_FRACTION,
    batch_sizes,
    plan,
)
from llmperf.perf.traffic import Traffic, traffic_from_scenario, unknown_traffic
from llmperf.run.compose import load_scenario

LLAMA_70B = get_preset("llama-3.1-70b")
LLAMA_8B = get_preset("llama-3.1-8b")
H100 = load_profile("h100-sxm")
H100_USABLE = 0.9 * 80 * 2**30


def test_llama_70b_bf16_weights_are_141_gb_from_70_6b_parameters():
    p = plan(LLAMA_70B, "bf16", H100, Traffic())
    assert p.params == pytest.approx(70.6e9, rel=0.002)
    assert p.weight_bytes == p.params * 2 == pytest.approx(141e9, rel=0.002)


def test_llama_70b_kv_cache_is_320_kib_per_token():
    p = plan(LLAMA_70B, "bf16", H100, Traffic(context_len=8192))
    assert p.kv_bytes_per_token == 80 * 8 * 128 * 2 * 2 == 320 * 1024
    assert p.kv_bytes_per_seq == 320 * 1024 * 8192


def test_llama_70b_does_not_fit_one_h100_and_its_weights_fit_on_two():
    p = plan(LLAMA_70B, "bf16", H100, Traffic())
    assert p.weight_bytes > 80 * 2**30 and not p.weights_fit_on_one_device
    assert p.devices_for_weights == 2 and p.weight_bytes <= 2 * H100_USABLE


def test_llama_70b_with_kv_for_32_sequences_of_8k_tokens_needs_4_h100s():
    p = plan(LLAMA_70B, "bf16", H100, Traffic(concurrency=32, context_len=8192))
    need = 70_553_706_496 * 2 + 32 * 8192 * 327_680 * (1 + KV_OVERHEAD_FRACTION)
    assert p.devices_needed == math.ceil(need / H100_USABLE) == 4
    assert p.tp == 4 and p.max_batch >= 32 and p.batch == 32


def test_max_batch_at_tp_2_is_what_is_left_after_the_weights():
    p = plan(LLAMA_70B, "bf16", H100, Traffic(concurrency=32, context_len=8192), tp=2)
    left = 2 * H100_USABLE - 70_553_706_496 * 2
    assert p.max_batch == math.floor(left / (8192 * 327_680 * 1.1)) == 4
    assert p.batch == 4 and any("fewer than the 32 wanted" in n for n in p.notes)


def test_llama_8b_bf16_decode_at_batch_1_on_h200_is_bound_near_299_tokens_per_s():
    p = plan(LLAMA_8B, "bf16", load_profile("h200"), Traffic(prompt_tokens=1, output_tokens=1))
    assert p.decode[0].batch == 1 and p.decode[0].bound == "memory"
    assert p.decode_tps_by_batch[1] == pytest.approx(4.8e12 / 16.06e9, rel=0.002)
    assert p.decode_tps_by_batch[1] == pytest.approx(299, rel=0.005)


def test_decode_rows_turn_compute_bound_where_flops_outgrow_bytes():
    h200 = load_profile("h200")
    p = plan(LLAMA_8B, "bf16", h200, Traffic(prompt_tokens=16, output_tokens=16))
    body, lm_head = body_matmul_params(LLAMA_8B), 128256 * 4096
    kv, ctx, weights = 131072, 32, LLAMA_8B.num_params() * 2
    for row in p.decode:
        b = row.batch
        memory_s = (weights + b * ctx * kv + b * kv) / 4.8e12
        compute_s = b * (2 * body + 2 * lm_head + 4 * 32 * 4096 * ctx) / 989.4e12
        assert row.step_s == pytest.approx(max(memory_s, compute_s))
        assert row.bound == ("memory" if memory_s >= compute_s else "compute")
    assert {r.bound for r in p.decode} == {"memory", "compute"}


def test_tensor_parallel_steps_add_two_ring_all_reduces_per_layer():
    pred1 = predict_latency(LLAMA_70B, "bf16", H100, 1, 128, 1024, tp=1)
    pred4 = predict_latency(LLAMA_70B, "bf16", H100, 1, 128, 1024, tp=4)
    comm_s = 2 * 80 * (2 * 3 / 4) * 1 * 8192 * 2 / 450e9
    norms_s = 3 * (2 * 80 + 1) * 8192 * 2 / (4 * 3.35e12)  # every rank reads its own norms
    assert pred4.decode_step_s == pytest.approx(pred1.decode_step_s / 4 + comm_s + norms_s)


def test_predicted_ttft_and_decode_step_match_the_roofline_by_hand():
    prof = HardwareProfile(
        name="t", kind="cpu", measured_mem_bw_bytes_per_s=2e10, measured_flops={"fp32": 1e11}
    )
    tiny = get_preset("tiny")
    pred = predict_latency(
        tiny, "fp32", prof, batch_size=2, prompt_len=64, context_len=100, weight_bytes=5e6
    )
    body, lm, kv, attn = 3_014_656, 512 * 256, 2048, 4 * 4 * 256
    prefill_bytes = 5e6 + 2 * 64 * kv * 2  # read and write the prompts' KV
    prefill_flops = 2 * body * 128 + 2 * lm * 2 + attn * 2 * 64 * 65 / 2
    assert pred.ttft_s == pytest.approx(max(prefill_bytes / 2e10, prefill_flops / 1e11))
    decode_bytes = 5e6 + 2 * 100 * kv + 2 * kv
    decode_flops = 2 * (2 * body + 2 * lm) + attn * 2 * 100
    assert pred.decode_step_s == pytest.approx(max(decode_bytes / 2e10, decode_flops / 1e11))
    assert (pred.prefill_bound, pred.decode_bound) == ("compute", "memory")


def test_int8_and_fp8_store_linears_and_token_tables_in_one_byte_with_per_channel_scales():
    """The engine's layout (tests/test_footprint.py holds the account to the engine's bytes)."""
    tiny = get_preset("tiny")
    linears = 3_014_656
    tables = 2 * 512 * 256  # embedding and LM head, untied, one byte per weight
    # One bf16 scale per output channel of q,k,v,o,gate,up,down and per vocabulary row.
    scales = (4 * (256 + 2 * 64 + 256 + 2 * 768 + 256) + 2 * 512) * 2
    norms = 256 * 9 * 2
    assert footprint(tiny, "int8").weight_bytes == linears + tables + scales + norms
    assert footprint(tiny, "fp8").weight_bytes == linears + tables + scales + norms
    assert footprint(tiny, "fp32").weight_bytes == tiny.num_params() * 4
    ratio = footprint(LLAMA_8B, "int8").weight_bytes / footprint(LLAMA_8B, "bf16").weight_bytes
    assert 0.5 < ratio < 0.6
    p = plan(tiny, "int8", H100, Traffic())
    assert p.weight_bytes == linears + tables + scales + norms


def test_cost_per_million_output_tokens_is_device_cost_over_decode_rate():
    p = plan(LLAMA_70B, "bf16", H100, Traffic(concurrency=32, context_len=8192))
    usd_per_s = 2.50 * 4 / 3600
    row32 = next(r for r in p.decode if r.batch == 32)
    assert row32.usd_per_1m_output_tokens == pytest.approx(usd_per_s / row32.tps * 1e6)
    assert p.usd_per_1m_output_tokens == pytest.approx(row32.usd_per_1m_output_tokens)
    assert p.tps_per_device == pytest.approx(row32.tps / 4)
    prefill_s = p.ttft_s_by_prompt[int(Traffic(concurrency=32, context_len=8192).prompt_tokens)]
    request_s = prefill_s + 256 * row32.step_s / 32
    assert p.usd_per_1m_tokens == pytest.approx(usd_per_s * request_s / (1024 + 256) * 1e6)


def test_batch_sizes_are_powers_of_two_then_the_max():
    assert batch_sizes(0) == []
    assert batch_sizes(1) == [1]
    assert batch_sizes(8) == [1, 2, 4, 8]
    assert batch_sizes(56) == [1, 2, 4, 8, 16, 32, 56]


def test_tp_that_does_not_shard_the_kv_heads_is_refused():
    with pytest.raises(ValueError, match=r"tp=3 does not divide the 8 KV heads; valid: 1, 2, 4, 8"):
        plan(LLAMA_70B, "bf16", H100, Traffic(), tp=3)


def test_too_big_for_tensor_parallelism_says_so():
    p = plan(LLAMA_70B, "bf16", load_profile("l4"), Traffic(concurrency=32, context_len=8192))
    assert p.devices_needed > 8 and p.tp == 8 and any("pipeline" in n for n in p.notes)


# -- workloads from scenarios ---------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_scenario_file_gives_mean_and_max_lengths_and_concurrency(tmp_path):
    f = write(
        tmp_path / "closed.yaml",
        "scenario:\n  name: closed\n  arrival: {process: closed, concurrency: 8}\n"
        "  prompt_tokens: {dist: uniform, min: 100, max: 300}\n"
        "  output_tokens: {dist: fixed, value: 50}\n",
    )
    fields = traffic_from_scenario(load_scenario(str(f)))
    assert fields == {
        "prompt_tokens": 200.0,
        "prompt_tokens_max": 300.0,
        "output_tokens": 50.0,
        "concurrency": 8.0,
    }
    w = Traffic(**fields)
    assert w.context_len == 250.0


def test_an_offline_scenario_runs_every_request_at_once(tmp_path):
    f = write(
        tmp_path / "off.yaml",
        "arrival: {process: offline}\nnum_requests: 64\n"
        "prompt_tokens: {dist: normal, mean: 512, std: 64}\n",
    )
    assert traffic_from_scenario(load_scenario(str(f))) == {
        "prompt_tokens": 512.0,
        "concurrency": 64.0,
    }


def test_an_open_loop_rate_gives_concurrency_by_littles_law(tmp_path):
    w = Traffic(prompt_tokens=512, output_tokens=128, rate_rps=20)
    p = plan(LLAMA_8B, "bf16", load_profile("h200"), w)
    b = p.concurrency
    step_s = predict_latency(
        LLAMA_8B, "bf16", load_profile("h200"), math.ceil(b), 512, 640
    ).decode_step_s
    ttft_s = predict_latency(LLAMA_8B, "bf16", load_profile("h200"), 1, 512, 640).ttft_s
    assert b == pytest.approx(20 * (ttft_s + 128 * step_s), rel=1e-6)
    assert 1 < b < p.max_batch


def test_a_scenario_name_is_composed_with_its_defaults_and_interpolations():
    # mixed-offline inherits `arrival: {process: offline}` from offline through Hydra defaults.
    assert traffic_from_scenario(load_scenario("mixed-offline"), "mixed-offline") == {
        "prompt_tokens": (16 + 512) / 2,
        "prompt_tokens_max": 512.0,
        "output_tokens": (8 + 256) / 2,
        "concurrency": 64.0,
    }
    # predict sends engine.max_batch_size requests at once (the reference engine's default 8).
    assert traffic_from_scenario(load_scenario("predict"), "predict")["concurrency"] == 8.0


def test_a_uniform_length_means_its_midpoint_whatever_else_it_states(tmp_path):
    f = write(tmp_path / "u.yaml", "prompt_tokens: {dist: uniform, min: 10, max: 30, value: 99}\n")
    assert traffic_from_scenario(load_scenario(str(f)))["prompt_tokens"] == 20.0


def test_a_trace_scenario_states_no_lengths_and_the_plan_says_so(capsys):
    scenario = load_scenario("trace")
    assert traffic_from_scenario(scenario, "trace") == {}
    assert set(unknown_traffic(scenario, "trace")) == {"prompt_tokens", "output_tokens",
                                                         "concurrency"}
    argv = ["model=llama-3.1-8b", "hardware=h200", "scenario=trace", "output_tokens=100"]
    assert cli.main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["context_len"] == 1024 + 100 and out["concurrency"] == 1
    assert [n.split(":")[0] for n in out["notes"]] == [
        "scenario trace takes prompt_tokens from its trace file",
        "scenario trace takes its arrivals from its trace file"]


def test_an_unknown_scenario_lists_the_installed_ones():
    with pytest.raises(ValueError, match=r"unknown scenario 'nope'; valid: "):
        load_scenario("nope")


# -- the command line ------------------------------------------------------------


def test_cli_json_has_the_documented_keys(capsys):
    rc = cli.main(
        [
            "model=llama-3.1-70b",
            "hardware=h100-sxm",
            "precision=bf16",
            "concurrency=32",
            "context_len=8192",
            "--json",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for key in (
        "params",
        "weight_bytes",
        "kv_bytes_per_token",
        "devices_needed",
        "max_batch",
        "decode_tps_by_batch",
    ):
        assert key in out
    assert out["devices_needed"] == 4 and out["kv_bytes_per_token"] == 327_680
    assert set(out["decode_tps_by_batch"]) == {str(b) for b in batch_sizes(out["max_batch"])}


def test_cli_table_names_the_bound_of_each_batch(capsys):
    assert cli.main(["model=llama-3.1-8b", "hardware=h200", "usd_per_hour=4"]) == 0
    out = capsys.readouterr().out
    assert "devices needed" in out and "memory" in out and "16.00" not in out
    assert "4.00" in out  # the overridden price per hour


def test_cli_reads_a_checkpoint_folder(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(get_preset("tiny").to_hf_dict()))
    assert cli.main([f"model={tmp_path}", "hardware=l4", "precision=fp16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (
        out["params"] == get_preset("tiny").num_params()
        and out["weight_bytes"] == out["params"] * 2
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["model=llama-3.1-70b"], "missing hardware="),
        (["model=llama-9", "hardware=h200"], "model 'llama-9' is neither a preset nor a folder"),
        (["model=tiny", "hardware=h900"], "unknown hardware profile 'h900'; valid:"),
        (
            ["model=tiny", "hardware=h200", "precision=int4"],
            "unknown precision 'int4'; valid: fp32, bf16",
        ),
        (["model=tiny", "hardware=h200", "tp=3"], "tp=3 does not divide"),
        (["model=tiny", "hardware=h200", "tp=two"], "tp must be an integer, got 'two'"),
        (["model=tiny", "hardware=h200", "batch=4"], "unknown argument 'batch'; valid: model"),
        (["model=tiny", "hardware=h200", "concurrency"], "is not key=value"),
        (["model=tiny", "hardware=h200", "scenario=nope"], "unknown scenario 'nope'"),
    ],
)
def test_cli_bad_arguments_print_one_line_and_exit_2(argv, message, capsys):
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and message in captured.err


def test_cli_module_exits_2_without_a_traceback():
    root = Path(__file__).parents[1]
    proc = subprocess.run(
        [sys.executable, "-m", "llmperf.perf", "model=tiny", "hardware=nope"],
        capture_output=True,
        text=True,
        cwd=root,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("llmperf-plan: error: unknown hardware profile 'nope'")


def test_reserve_and_overhead_are_stated_in_the_plan():
    p = plan(LLAMA_8B, "bf16", H100, Traffic())
    assert (p.runtime_reserve_fraction, p.kv_overhead_fraction) == (
        RUNTIME_RESERVE_FRACTION,
        KV_OVERHEAD_FRACTION,
    )
    assert p.usable_bytes_per_device == pytest.approx(H100_USABLE)
