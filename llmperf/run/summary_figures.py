"""The summary's figures that come from beyond the client's records: the saturation
verdict, the server's own account (/metrics) and the latency split, the prefix-cache hit
rate, telemetry, the roofline (MBU/MFU), the latency prediction and cost per token. Each
`add_*` is a stage of `llmperf.run.runner.STAGES`, adding to `run.summary`.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from engines.base import StepStat
from engines.openai_options import OpenAIEngineConfig
from engines.reference.config import ModelConfig
from llmperf.hardware.profile import HardwareProfile
from llmperf.measure.loadgen import LoadResult
from llmperf.measure.metrics import e2e_s, ttft_s
from llmperf.measure.records import RequestRecord
from llmperf.perf.cost import cost_summary
from llmperf.perf.footprint import device_of, footprint
from llmperf.perf.prediction import prediction_summary
from llmperf.perf.roofline import estimate_summary, roofline_summary
from llmperf.run.state import Run
from llmperf.serverside.decomposition import decompose
from llmperf.serverside.window import round_trip_summary, window_summary
from llmperf.workload.requests import longest_shared_prefix


def measured_steps(run: Run) -> list[StepStat]:
    """The engine's steps that started in the measured window (after warmup)."""
    if not run.engine.capabilities.step_stats:
        return []
    start = run.load.origin_perf_counter_s + run.load.measure_start_s
    return [s for s in run.engine.step_stats() if s.start_s >= start]


def add_load_backend_figures(run: Run) -> None:
    """Workers on clocks of their own (backend=ray): each one's offset, its uncertainty and
    drift into summary.json (the clocks_agree check) and environment.json; lost workers."""
    if run.clocks:
        clocks = [track.to_dict() for track in run.clocks]
        run.summary["clocks"] = [{k: v for k, v in c.items() if k != "estimates"} for c in clocks]
        path = run.run_dir / "environment.json"
        if path.is_file():
            environment = json.loads(path.read_text(encoding="utf-8"))
            environment["clocks"] = clocks
            path.write_text(json.dumps(environment, indent=2) + "\n", encoding="utf-8")
    if run.workers_lost:
        run.summary["workers_lost"] = [lost.to_dict() for lost in run.workers_lost]


def saturation_summary(load: LoadResult) -> dict[str, Any]:
    verdict = load.saturation
    if verdict is None:
        return {"saturated": False, "saturated_at_rps": None, "saturation_detail": None}
    return {
        "saturated": True,
        "saturated_at_rps": verdict.rate_rps,
        "saturation_detail": verdict.describe(),
    }


def add_server_figures(run: Run) -> None:
    """The server's own figures over the measured window, and how they split the client's latency.

    The longest prompt prefix two requests share says whether prefix-cache hits on the
    server are the workload's own or left over from earlier runs.
    """
    if run.scraper is None:
        return
    s = run.summary
    s["server_family"] = run.scraper.family.name
    if run.scraper.family.note:  # what this server's metrics cannot give
        s["server_note"] = run.scraper.family.note
    s["server_metrics_url"] = run.scraper.url
    s["server_scrape_errors"] = len(run.scraper.errors)
    s.update(window_summary(run.scraper.rows, run.load.measure_start_s, run.load.end_s, run.scraper.opening_s))
    s.update(round_trip_summary(run.scraper.round_trips, run.load.measure_start_s, run.load.end_s))
    s.update(decompose(s))
    if not run.workload.has_sessions:  # a session's turns share its history by design
        sent = [*run.workload.warmup(), *itertools.islice(run.workload.requests(), run.load.num_dispatched)]
        s["workload_shared_prefix_tokens"] = longest_shared_prefix([r.prompt_token_ids or [] for r in sent])


def model_label(run: Run) -> str:
    """What was measured: the served model (HTTP engines), the checkpoint folder with its
    parameter count, or the preset."""
    info = run.engine.info()
    if isinstance(run.config.engine, OpenAIEngineConfig):
        return str(info.get("model"))
    name = Path(run.config.model.path).name if run.config.model.path else run.config.model.name
    params = info.get("params")
    return f"{name} ({params / 1e6:.1f}M)" if params else name


def add_prefix_cache_figures(run: Run) -> None:
    """The measured prefix-cache hit rate beside the expected one: from the engine's own
    counter (its steps), else from the server's prefix-cache hits counter over the measured
    window (/metrics: vLLM's `vllm:prefix_cache_hits`, llmperf-serve's); engines that count
    nothing leave it out. `prefix_cache_hit_source` says which."""
    s = run.summary
    if "prefix_cache_hit_rate_expected" not in s or not s["input_tokens_total"]:
        return
    steps = measured_steps(run)
    if steps:
        hits, source = sum(step.prefix_cache_hit_tokens for step in steps), "engine steps"
    elif s.get("server_prefix_cache_hits_tokens") is not None:
        hits, source = s["server_prefix_cache_hits_tokens"], "server /metrics"
    else:
        return
    s["prefix_cache_hit_tokens"] = hits
    s["prefix_cache_hit_rate"] = hits / s["input_tokens_total"]
    s["prefix_cache_hit_source"] = source


def add_hardware_figures(run: Run) -> None:
    """Telemetry, roofline MBU/MFU, the latency prediction and cost per token.

    Telemetry, energy and cost all cover the measured window (window_start_s to
    window_end_s, duration_s long). Tensor-parallel ranks on GPUs each have a
    device: bandwidth, FLOP/s and price add up over them. Ranks on a CPU share its
    memory bandwidth, cores and price.
    """
    s = run.summary
    if run.collector is not None:
        s.update(run.collector.summarize(s["window_start_s"], s["window_end_s"]))
    info = s["engine"]
    steps = measured_steps(run)
    profile = run.profile
    devices = info.get("tp", 1) if profile is not None and profile.kind == "gpu" else 1
    if devices > 1:
        profile = profile.scaled(devices)
    model_config = info.get("model_config")
    if model_config and profile is not None and "weight_bytes" not in info and "precision" in info:
        info.update(accounted_bytes(ModelConfig(**model_config), info["precision"], profile))
    roofline_keys = ("weight_bytes", "kv_bytes_per_token", "compute_dtype")
    if model_config and profile is not None and all(k in info for k in roofline_keys):
        model = ModelConfig(**model_config)
        kv_bytes_per_element = info["kv_bytes_per_token"] / model.kv_bytes_per_token(1)
        s.update(_roofline(s, steps, model, info, kv_bytes_per_element, profile))
        s.update(
            prediction_summary(
                steps, model, info, run.profile, s, tp=devices, kv_bytes_per_element=kv_bytes_per_element
            )
        )
    s.update(
        cost_summary(
            profile.usd_per_hour if profile else None,
            s["duration_s"],
            s["input_tokens_total"],
            s["output_tokens_total"],
            steps=steps,
            request_times=None if steps else request_times(run.records),
            energy_j=s.get("energy_j"),
        )
    )


def request_times(records: list[RequestRecord]) -> list[tuple[float, float]]:
    """(TTFT, E2E) of each measured request that completed: the cost split without steps."""
    return [
        (ttft, e2e_s(r))
        for r in records
        if not r.warmup and r.ok and (ttft := ttft_s(r)) is not None
    ]


def accounted_bytes(model: ModelConfig, precision: str, profile: HardwareProfile) -> dict[str, Any]:
    """The bytes an engine that cannot see its weights (a server over HTTP) holds, from
    the account of its model at its precision on the profile's kind of device."""
    account = footprint(model, precision, device_of(profile.kind))
    return {
        "weight_bytes": account.weight_bytes,
        "kv_bytes_per_token": account.kv_bytes_per_token,
        "compute_dtype": account.compute_dtype,
        "weight_bytes_source": "account",
    }


def _roofline(
    s: dict[str, Any],
    steps: list[StepStat],
    model: ModelConfig,
    info: dict[str, Any],
    kv_bytes_per_element: float,
    profile: HardwareProfile,
) -> dict[str, Any]:
    # The FLOP ceiling is the Linears' arithmetic's (an engine may widen bf16 weights to fp32).
    common = (model, info["weight_bytes"], kv_bytes_per_element, profile,
              info.get("matmul_dtype", info["compute_dtype"]))
    if steps:
        return roofline_summary(
            steps, *common, output_tokens=s["output_tokens_total"], duration_s=s["duration_s"]
        )
    return estimate_summary(
        *common,
        output_tokens=s["output_tokens_total"],
        input_tokens=s["input_tokens_total"],
        num_requests=s["num_completed"],
        duration_s=s["duration_s"],
        tpot_s_mean=(s.get("tpot_s") or {}).get("mean"),
    )
