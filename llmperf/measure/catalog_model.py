"""The catalog's entries for the performance model's figures: MBU, MFU and the roofline per
step phase, the prediction, cost and energy, telemetry, the steps of steps.jsonl and their work
(llmperf/measure/catalog.py gathers them)."""

from __future__ import annotations

from dataclasses import replace

from llmperf.measure.catalog_base import (
    COLLECTOR,
    COST,
    HIGHER,
    LOWER,
    MEASURED_SUFFIX,
    NEITHER,
    PHASES,
    PREDICTION,
    ROOFLINE,
    TELEMETRY,
    Metric,
    _m,
    _phases,
)


def model_figures() -> list[Metric]:
    metrics: list[Metric] = []
    peak = ("÷ peak memory bandwidth (the datasheet's; `_measured`: the probe's)")
    metrics += _phases("mbu_", "MBU", "fraction", HIGHER, "bytes the phase's steps had to read"
                       " (all weights once per step + the KV cache positions attended + new K/V"
                       f" written) ÷ their total time {peak}")
    metrics += _phases("mfu_", "MFU", "fraction", HIGHER, "model FLOPs of the phase's steps (2 ×"
                       " matmul weights per token, the LM head once per sampled sequence, 4 ×"
                       " layers × q_size per causal attention pair) ÷ their time ÷ peak FLOP/s of"
                       " the compute dtype (the datasheet's; `_measured`: the probe's)")
    metrics += [
        _m("roofline_output_tps", "roofline output throughput", "tok/s", NEITHER, "output tokens"
           " ÷ the sum of every measured step's roofline lower bound, max(bytes ÷ bandwidth,"
           " FLOPs ÷ FLOP/s): the ceiling at the run's batch sizes and contexts",
           ROOFLINE, "roofline"),
        _m("roofline_fraction", "share of roofline", "fraction", HIGHER,
           "`output_throughput_tps` ÷ `roofline_output_tps`", ROOFLINE, "roofline"),
        _m("roofline_step_fraction", "share of roofline, busy steps", "fraction", HIGHER,
           "the sum of the steps' lower bounds ÷ the sum of their times (idle time between"
           " steps left out)", ROOFLINE, "roofline"),
    ]
    metrics += _phases("roofline_step_fraction_", "share of roofline, steps", "fraction", HIGHER,
                       "the sum of the phase's steps' lower bounds, max(bytes ÷ bandwidth, FLOPs"
                       " ÷ FLOP/s), ÷ the sum of their times: how near that kind of step came to"
                       " its own limit")
    metrics += _phases("roofline_bound_", "roofline bound", "s", NEITHER, "the sum of the"
                       " phase's steps' lower bounds: the least time the hardware allows them",
                       suffix="_s")
    measured = [replace(m, name=m.name + MEASURED_SUFFIX, label=m.label + " (measured peak)",
                        family=(m.family or m.name) + MEASURED_SUFFIX)
                for m in metrics if m.group == "roofline"]
    metrics += measured
    metrics += [_m(f"step_count_{phase}", f"steps {phase}", "steps", NEITHER, "measured steps"
                   " of the phase (decode: no prompt tokens; prefill: no decode tokens; mixed:"
                   " both)", ROOFLINE, "roofline", family="step_count_{phase}") for phase in PHASES]
    metrics += [_m(f"step_time_{phase}_s", f"step time {phase}", "s", NEITHER, "the summed"
                   " times of the phase's measured steps", ROOFLINE, "roofline",
                   family="step_time_{phase}_s") for phase in PHASES]
    metrics += [_m(f"achieved_bw_{phase}_bytes_per_s", f"achieved bandwidth {phase}", "B/s",
                   HIGHER, "bytes the phase's steps had to read and write ÷ their total time",
                   ROOFLINE, "roofline", family="achieved_bw_{phase}_bytes_per_s")
                for phase in PHASES]
    metrics += [_m(f"achieved_flops_{phase}_per_s", f"achieved FLOP/s {phase}", "FLOP/s",
                   HIGHER, "model FLOPs of the phase's steps ÷ their total time", ROOFLINE,
                   "roofline", family="achieved_flops_{phase}_per_s") for phase in PHASES]
    pred = "prediction"
    metrics += [
        _m("predicted_ttft_s", "TTFT predicted", "s", NEITHER, "the roofline's TTFT for the"
           " run's typical prefill step (its batch and prompt length) at the profile's"
           " sustained ceilings", PREDICTION, pred),
        _m("predicted_decode_step_s", "decode step predicted", "s", NEITHER, "the roofline's"
           " time for the run's typical decode step (its batch and context)", PREDICTION, pred),
        _m("measured_decode_step_s", "decode step measured", "s", NEITHER,
           "median time of the measured decode steps", PREDICTION, pred),
        _m("prediction_error_ttft", "TTFT prediction error", "fraction", NEITHER,
           "`predicted_ttft_s` / median TTFT − 1", PREDICTION, pred),
        _m("prediction_error_decode_step", "decode step prediction error", "fraction", NEITHER,
           "`predicted_decode_step_s` / `measured_decode_step_s` − 1", PREDICTION, pred),
        _m("prediction_error_tpot", "TPOT prediction error", "fraction", NEITHER,
           "`predicted_decode_step_s` / median TPOT − 1", PREDICTION, pred),
        _m("prediction_batch", "decode batch predicted for", "sequences", NEITHER,
           "median sequences of the measured decode steps", PREDICTION, pred),
        _m("prediction_prefill_batch", "prefill batch predicted for", "sequences", NEITHER,
           "median sequences of the measured prefill steps", PREDICTION, pred),
        _m("prediction_prompt_len", "prompt length predicted for", "tokens", NEITHER,
           "median prompt tokens per sequence of the measured prefill steps", PREDICTION, pred),
        _m("prediction_context_len", "context predicted for", "tokens", NEITHER,
           "median context tokens per sequence of the measured decode steps", PREDICTION, pred),
    ]
    cost = "cost"
    metrics += [
        _m("usd_per_1m_tokens", "cost", "USD/1M tok", LOWER, "run cost"
           " (`hardware.usd_per_hour` × `duration_s`, the measured window) ÷ all tokens × 10⁶", COST, cost),
        _m("usd_per_1m_input_tokens", "input cost", "USD/1M tok", LOWER,
           "the run cost's input share (the share of step time spent on prompt tokens, a mixed"
           " step split by its token counts; when an engine reports no steps (HTTP), by"
           " measured request time: Σ TTFT ÷ Σ E2E; `cost_split` says which) ÷ input tokens"
           " × 10⁶", COST, cost),
        _m("usd_per_1m_output_tokens", "output cost", "USD/1M tok", LOWER,
           "the run cost's output share ÷ output tokens × 10⁶", COST, cost),
        _m("run_cost_usd", "run cost", "USD", NEITHER,
           "`hardware.usd_per_hour` × `duration_s` / 3600", COST, cost),
        _m("cost_input_share", "cost share of input", "fraction", NEITHER,
           "the share of the run cost charged to input tokens (`cost_split` says how)",
           COST, cost),
        _m("energy_j", "energy", "J", NEITHER, "NVML's total-energy counter (else integrated"
           " power) over the same measured window as the cost, read at the window's edges; null"
           " when nothing measures power", COST, cost),
        _m("energy_per_output_token_j", "energy per output token", "J", LOWER,
           "`energy_j` ÷ output tokens", COST, cost),
        _m("telemetry_num_samples", "telemetry samples", "samples", NEITHER,
           "telemetry samples in the measured window", TELEMETRY, "telemetry"),
        _m("telemetry_interval_s", "telemetry interval", "s", NEITHER,
           "the time between telemetry samples asked for (`telemetry.interval_s`)",
           COLLECTOR, "telemetry"),
        _m("telemetry_collector_cpu_s", "collector's own CPU time", "s", LOWER,
           "CPU seconds the sampling thread used over the whole run (its reads included): the"
           " collector's own cost, whatever the machine's noise", COLLECTOR, "telemetry"),
        _m("telemetry_collector_cpu_per_sample_s", "collector's CPU time a sample", "s", LOWER,
           "`telemetry_collector_cpu_s` ÷ every sample the run took: the cost of one sample,"
           " whatever the run's length", COLLECTOR, "telemetry"),
        _m("telemetry_throttled_fraction", "share of samples throttled", "fraction", LOWER,
           "telemetry samples with an NVML power, thermal or board clock limit ÷ samples",
           TELEMETRY, "telemetry"),
    ]
    steps = "llmperf/measure/step_figures.py"
    metrics += [
        _m("steps.count", "engine steps", "steps", LOWER, "number of engine steps",
           f"{steps}:steps_count", "steps"),
        _m("steps.tokens_per_step", "tokens per step", "tokens", HIGHER,
           "(prefill + decode tokens) / steps", f"{steps}:tokens_per_step", "steps"),
        _m("steps.seqs_per_step", "sequences per step", "sequences", HIGHER,
           "mean sequences per step", f"{steps}:seqs_per_step", "steps"),
        _m("steps.padded_fraction", "padded share of slots", "fraction", LOWER,
           "padded slots / (padded slots + real tokens): the compute static batching wastes",
           f"{steps}:padded_fraction", "steps"),
        _m("steps.preemptions", "preemptions", "preemptions", LOWER, "total preemptions",
           f"{steps}:preemptions", "steps"),
        _m("steps.kv_blocks_peak", "KV blocks at peak", "blocks", LOWER,
           "most KV cache blocks in use at once", f"{steps}:kv_blocks_peak", "steps"),
        _m("steps.decode_step_p10_s", "decode step p10", "s", LOWER,
           "10th percentile of the pure decode steps' durations (the fastest tenth: what a"
           " neighbour on the cores did not stretch)", f"{steps}:decode_step_p10_s", "steps"),
        _m("steps.decode_cpu_p10_s", "decode step CPU p10", "s", LOWER,
           "10th percentile of the pure decode steps' process CPU time, all threads",
           f"{steps}:decode_cpu_p10_s", "steps"),
    ]
    work = "llmperf/gate/ab_figures.py"
    metrics += [
        _m("work.bytes_per_token", "bytes per token", "B", LOWER,
           "bytes the measured steps had to move, by the roofline's work model ÷ tokens computed",
           f"{work}:bytes_per_token", "work"),
        _m("work.flops_per_token", "FLOPs per token", "FLOP", LOWER,
           "FLOPs the measured steps had to do, by the roofline's work model ÷ tokens computed",
           f"{work}:flops_per_token", "work"),
    ]
    return metrics
