"""The GPU self-check's figures, one function each, run only where CUDA is present.

Every check returns a JSON-able dict (units in the key names). `run_checks`
runs them in order; without CUDA each figure is "skipped: no GPU", and a check
that fails reads "error: ..." without stopping the others. The decode figures
use a Llama-3.1-8B-shaped model with random weights (shapes are what speed
depends on), built once in bf16 and shared by the checks that need it.
"""

from __future__ import annotations

import functools
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

SKIPPED_NO_GPU = "skipped: no GPU"
MODEL = "llama-3.1-8b"
CONTEXT = 256  # cached positions per sequence in the decode figures
DECODE_BATCHES = (1, 8, 32)
PREFILL_TOKENS = 2048
ATTENTION_SHAPES = ((1, 4096), (8, 2048), (32, 1024))  # (sequences, context), llama-3.1-8b's heads
REPEATS = 20


def gpu_present() -> bool:
    return torch.cuda.is_available()


def run_checks(names: list[str] | None = None, has_gpu: Callable[[], bool] = gpu_present) -> dict[str, Any]:
    names = list(CHECKS) if names is None else names
    if not has_gpu():
        return {name: SKIPPED_NO_GPU for name in names}
    out: dict[str, Any] = {}
    for name in names:
        try:
            out[name] = CHECKS[name]()
        except Exception as e:  # one figure failing must not hide the others
            out[name] = f"error: {type(e).__name__}: {e}"
        torch.cuda.empty_cache()
    return out


def _cuda_median_s(fn: Callable[[], Any], repeats: int = REPEATS) -> float:
    """Median wall time of `fn` with the GPU synchronised around each call, after two warm-ups."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# -- the device --------------------------------------------------------------------------


def device() -> dict[str, Any]:
    """NVML's view of device 0: name, memory, power, clocks, and whether GPM metrics work."""
    import pynvml as nvml

    nvml.nvmlInit()
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        figures = {
            "name": nvml.nvmlDeviceGetName(handle),
            "driver": nvml.nvmlSystemGetDriverVersion(),
            "memory_total_bytes": memory.total,
            "memory_used_bytes": memory.used,
            "power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1e3,
            "power_limit_w": nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3,
            "sm_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
            "sm_clock_max_mhz": nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM),
            "mem_clock_mhz": nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
        }
        try:
            figures["gpm_supported"] = bool(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
        except (AttributeError, nvml.NVMLError) as e:
            figures["gpm_supported"] = f"no: {e}"
        return figures
    finally:
        nvml.nvmlShutdown()


def _spec_bandwidth_bytes_per_s() -> float | None:
    from llmperf.hardware.registry import resolve_profile

    return resolve_profile("auto", probe_ceilings=False).mem_bw("datasheet")


def _spec_flops(dtype: str) -> float | None:
    from llmperf.hardware.registry import resolve_profile

    return resolve_profile("auto", probe_ceilings=False).flops(dtype, "datasheet")


# -- attention -----------------------------------------------------------------------------


def attention() -> dict[str, Any]:
    """Decode attention over a paged cache, compiled Triton kernel against torch SDPA."""
    from engines.reference.attention import get_backend
    from engines.reference.config import ModelConfig
    from engines.reference.presets import get_preset

    cfg: ModelConfig = get_preset(MODEL)
    backends = {name: get_backend(name) for name in ("triton", "sdpa")}
    out = {}
    for batch, context in ATTENTION_SHAPES:
        args = (*_decode_attention_inputs(cfg, batch, context), cfg.head_dim**-0.5)
        times = {name: _cuda_median_s(functools.partial(backend, *args)) for name, backend in backends.items()}
        out[f"batch{batch}_ctx{context}"] = {
            "triton_s": times["triton"],
            "sdpa_s": times["sdpa"],
            "sdpa_over_triton": times["sdpa"] / times["triton"],
        }
    return out


def _decode_attention_inputs(cfg, batch: int, context: int, block_size: int = 16):
    from engines.reference.attention import AttentionMetadata

    dev, dtype = torch.device("cuda"), torch.bfloat16
    blocks_per_seq = -(-context // block_size)
    num_blocks = batch * blocks_per_seq + 1
    shape = (num_blocks, block_size, cfg.num_key_value_heads, cfg.head_dim)
    k_cache, v_cache = torch.randn(shape, dtype=dtype, device=dev), torch.randn(shape, dtype=dtype, device=dev)
    tables = (torch.randperm(num_blocks - 1, device=dev)[: batch * blocks_per_seq] + 1).view(batch, -1)
    meta = AttentionMetadata(
        query_lens=[1] * batch,
        seq_lens=[context] * batch,
        cu_query_lens=torch.arange(batch + 1, dtype=torch.int32, device=dev),
        seq_lens_t=torch.full((batch,), context, dtype=torch.int32, device=dev),
        block_tables=tables.int(),
        slot_mapping=torch.zeros(batch, dtype=torch.long, device=dev),
        block_size=block_size,
    )
    q = torch.randn(batch, cfg.num_attention_heads, cfg.head_dim, dtype=dtype, device=dev)
    return q, k_cache, v_cache, meta


# -- the engine on an 8B-shaped model --------------------------------------------------------


@functools.cache
def _engine(precision: str = "bf16", compile: bool = False):
    from engines.reference import ReferenceEngine

    return ReferenceEngine(
        model=MODEL, precision=precision, device="cuda", compile=compile,
        max_num_seqs=max(DECODE_BATCHES), max_model_len=max(PREFILL_TOKENS, CONTEXT) + 16,
        max_num_batched_tokens=PREFILL_TOKENS,
        num_kv_blocks=max(DECODE_BATCHES) * (PREFILL_TOKENS // 16 + 2),
    )  # fmt: skip


def _decode_step_s(engine, batch: int) -> float:
    from engines.reference.decode_probe import decode_batch, release, run_step

    steps = decode_batch(engine, batch, CONTEXT)
    try:
        return _cuda_median_s(lambda: run_step(engine, steps))
    finally:
        release(engine, steps)


def decode() -> dict[str, Any]:
    """Decode steps at batch 1/8/32, bf16: tokens/s and bandwidth used against the datasheet's."""
    eng = _engine()
    spec_bw = _spec_bandwidth_bytes_per_s()
    kv_bytes_per_token = eng.local_config.kv_bytes_per_token(2)
    out: dict[str, Any] = {"model": MODEL, "weight_bytes": eng.weight_bytes, "spec_bw_bytes_per_s": spec_bw}
    for batch in DECODE_BATCHES:
        step_s = _decode_step_s(eng, batch)
        read_bytes = eng.weight_bytes + batch * CONTEXT * kv_bytes_per_token
        out[f"batch{batch}"] = {
            "step_s": step_s,
            "output_tps": batch / step_s,
            "mbu": read_bytes / step_s / spec_bw if spec_bw else None,
        }
    return out


def cuda_graph() -> dict[str, Any]:
    """One decode step's forward replayed from a captured CUDA graph, against eager launches."""
    return {f"batch{batch}": _graph_against_eager(_engine(), batch) for batch in DECODE_BATCHES}


def _graph_against_eager(eng, batch: int) -> dict[str, float]:
    from engines.reference.decode_probe import decode_batch, release

    runner, dev = eng.runner, eng.device
    steps = decode_batch(eng, batch, CONTEXT)
    inputs, _ = runner.prepare(steps)
    meta = runner._metadata(inputs)
    _ = meta.decode_batch  # derived before capture: it allocates
    ids = torch.tensor(inputs.input_ids, device=dev)
    pos = torch.tensor(inputs.positions, device=dev)
    rows = torch.tensor(inputs.logits_rows, device=dev)

    def forward():
        with torch.inference_mode():
            return eng.model(ids, pos, runner.kv_layers, meta, runner.backend, rows)

    try:
        eager_s = _cuda_median_s(forward)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            forward()  # warm-up off the capture stream, as CUDA graphs require
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            forward()
        graph_s = _cuda_median_s(graph.replay)
    finally:
        release(eng, steps)
    return {"eager_s": eager_s, "graph_s": graph_s, "speedup": eager_s / graph_s}


def compile_speedup() -> dict[str, Any]:
    """`engine.compile=true` against eager: decode step time at each batch, and the compile time."""
    eager, compiled = _engine(), _engine(compile=True)
    out: dict[str, Any] = {}
    for batch in DECODE_BATCHES:
        eager_s, compiled_s = _decode_step_s(eager, batch), _decode_step_s(compiled, batch)
        out[f"batch{batch}"] = {"eager_s": eager_s, "compiled_s": compiled_s, "speedup": eager_s / compiled_s}
    out["compile_s"] = compiled.info().get("compile_s")
    _engine.cache_clear()
    return out


def quantized() -> dict[str, Any]:
    """Decode at batch 1 with int8 and fp8 weights against bf16."""
    bf16_s = _decode_step_s(_engine(), 1)
    _engine.cache_clear()
    out: dict[str, Any] = {"bf16_step_s": bf16_s}
    for precision in ("int8", "fp8"):
        step_s = _decode_step_s(_engine(precision), 1)
        _engine.cache_clear()
        out[f"{precision}_step_s"] = step_s
        out[f"{precision}_speedup_vs_bf16"] = bf16_s / step_s
    return out


def prefill() -> dict[str, Any]:
    """One 2048-token prompt: model FLOPs per second against the datasheet's bf16 peak."""
    eng = _engine()
    prompt = [list(range(3, 3 + PREFILL_TOKENS))]

    def one_prefill():
        eng.generate(prompt, max_tokens=1, ignore_eos=True)

    step_s = _cuda_median_s(one_prefill, repeats=5)
    cfg = eng.config
    attention_flops = 2 * cfg.num_hidden_layers * cfg.q_size * PREFILL_TOKENS**2  # QK^T and PV, causal half
    flops = 2 * eng.weight_bytes / 2 * PREFILL_TOKENS + attention_flops
    peak = _spec_flops("bf16")
    return {"tokens": PREFILL_TOKENS, "step_s": step_s, "flops_per_s": flops / step_s,
            "mfu": flops / step_s / peak if peak else None}  # fmt: skip


def telemetry_overhead() -> dict[str, Any]:
    """Decode step time at batch 8 with NVML sampled every 50 ms beside it, against without."""
    from llmperf.telemetry.nvml import NvmlSampler

    eng = _engine()
    sampler = NvmlSampler()
    sampler.open()
    stop = threading.Event()

    def sample_every_50_ms():
        while not stop.wait(0.05):
            sampler.read()

    off, on = [], []
    try:
        for _ in range(3):
            off.append(_decode_step_s(eng, 8))
            thread = threading.Thread(target=sample_every_50_ms, daemon=True)
            thread.start()
            on.append(_decode_step_s(eng, 8))
            stop.set()
            thread.join()
            stop.clear()
    finally:
        sampler.close()
    off_s, on_s = statistics.median(off), statistics.median(on)
    return {"step_s_off": off_s, "step_s_on": on_s, "overhead": on_s / off_s - 1}


CHECKS: dict[str, Callable[[], dict[str, Any]]] = {
    "device": device,
    "attention": attention,
    "decode": decode,
    "cuda_graph": cuda_graph,
    "compile": compile_speedup,
    "quantized": quantized,
    "prefill": prefill,
    "telemetry_overhead": telemetry_overhead,
}
