"""A short measurement of what this machine can do: read bandwidth and matmul FLOP/s.

Read bandwidth is a `torch.sum` over a tensor several times larger than the
last-level cache (best of a few repeats); matmul FLOP/s is a square matmul,
grown until one run takes long enough to time, best of the repeats that fit a
small time budget, through the kernel the reference engine uses (on a CPU with
oneDNN, a weight packed for oneDNN: MKL's GEMM can be several times slower on
some CPUs). Both run with torch's thread count, so they measure what torch
itself can reach. On a CPU it also measures what decode sustains: weight
streaming through the engine's one-row kernel on a worker thread, and the fixed
cost per layer of a decode step. The whole probe takes a few seconds on a CPU.

Results are cached in `$LLMPERF_CACHE_DIR/probe.json` (default
`~/.cache/llmperf/`), keyed by device model and thread count, and re-used
until `force=True`. The benchmark files and acceptance checks use this same
read bandwidth as "the machine's measured read bandwidth".
"""

from __future__ import annotations

import functools
import json
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from engines.reference.cpu_layout import has_bf16_arithmetic
from llmperf.paths import cache_dir

CACHE_FILE = "probe.json"
PROBE_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
_MIN_READ_BYTES = {"cpu": 256 * 2**20, "cuda": 2**30}
_MAX_MATMUL_N = {"cpu": 4096, "cuda": 16384}
_MIN_TIMED_S = 0.02  # a matmul shorter than this is mostly launch and timer noise
_MATMUL_BUDGET_S = 0.25  # per dtype, after sizing
_READ_REPEATS = 20  # at most, within _READ_BUDGET_S
_READ_BUDGET_S = 0.3


@dataclass
class ProbeResult:
    key: str  # cache key: device model and thread count
    device: str  # "cpu" or "cuda"
    device_name: str
    num_threads: int
    read_bw_bytes_per_s: float
    flops: dict[str, float] = field(default_factory=dict)  # matmul FLOP/s per dtype
    read_bytes: int = 0  # size of the tensor read
    # decode-like weight streaming through the engine's matrix-vector kernel, from a
    # worker thread as the engine runs it (CPU only): what decode can sustain
    stream_bw_bytes_per_s: float | None = None
    # a decode step's fixed cost per decoder layer (op launches, norms, attention over a
    # short context), from the reference engine's `tiny` preset, whose weights sit in cache
    layer_overhead_s: float | None = None
    torch_version: str = ""
    measured_at: float = 0.0  # unix time
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def machine_description() -> str:
    """What a page of CPU figures was measured on: cores, model, and whether the CPU has bf16
    arithmetic, which decides how bf16 runs here (docs/kernels.md)."""
    bf16 = "with" if has_bf16_arithmetic() else "without"
    return f"{os.cpu_count()} cores of an {cpu_model_name()}, {bf16} bf16 arithmetic (AVX512_BF16 or AMX)"


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name(0)
    return cpu_model_name()


PROBE_VERSION = 4  # bumped when the method changes, so cached figures are measured again


def probe_key(device: str, name: str, num_threads: int) -> str:
    return f"v{PROBE_VERSION}|{device}|{name}|threads={num_threads}"


def probe(
    device: str = "cpu",
    *,
    force: bool = False,
    cache_path: Path | None = None,
    read_bytes: int | None = None,
) -> ProbeResult:
    """The cached probe of `device` ("cpu" or "cuda"), measuring it when not cached or `force`."""
    if device not in _MIN_READ_BYTES:
        raise ValueError(
            f"probe device {device!r} is not valid; valid: {', '.join(_MIN_READ_BYTES)}"
        )
    path = cache_path or cache_dir() / CACHE_FILE
    num_threads = torch.get_num_threads()
    key = probe_key(device, device_name(device), num_threads)
    cached = _read_cache(path)
    if key in cached and not force:
        try:
            return ProbeResult(**cached[key])
        except TypeError:
            pass  # written by another version of this module: measure again
    result = measure(device, read_bytes=read_bytes)
    cached[key] = result.to_dict()
    _write_cache(path, cached)
    return result


def measure(device: str = "cpu", read_bytes: int | None = None) -> ProbeResult:
    """Measure now, without the cache."""
    start = time.perf_counter()
    num_bytes = read_bytes or default_read_bytes(device)
    read_bw = measure_read_bw_bytes_per_s(device, num_bytes)
    stream_bw = measure_stream_bw_bytes_per_s(num_bytes) if device == "cpu" else None
    layer_overhead = measure_layer_overhead_s() if device == "cpu" else None
    flops = {name: measure_matmul_flops(device, dtype) for name, dtype in PROBE_DTYPES.items()}
    name = device_name(device)
    return ProbeResult(
        key=probe_key(device, name, torch.get_num_threads()),
        device=device,
        device_name=name,
        num_threads=torch.get_num_threads(),
        read_bw_bytes_per_s=read_bw,
        flops=flops,
        read_bytes=num_bytes,
        stream_bw_bytes_per_s=stream_bw,
        layer_overhead_s=layer_overhead,
        torch_version=torch.__version__,
        measured_at=time.time(),
        duration_s=time.perf_counter() - start,
    )


def default_read_bytes(device: str) -> int:
    """Several times the last-level cache, so the reads come from memory."""
    if device == "cuda":
        llc = torch.cuda.get_device_properties(0).L2_cache_size
    else:
        llc = last_level_cache_bytes()
    return max(_MIN_READ_BYTES[device], 8 * llc)


def last_level_cache_bytes() -> int:
    """Sum of the distinct L3 caches Linux reports (0 where it reports none)."""
    seen: dict[str, int] = {}
    for index in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cache/index[0-9]*"):
        try:
            if (index / "level").read_text().strip() != "3":
                continue
            shared = (index / "shared_cpu_list").read_text().strip()
            seen[shared] = _parse_size((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
    return sum(seen.values())


def measure_read_bw_bytes_per_s(device: str, num_bytes: int, repeats: int = _READ_REPEATS) -> float:
    """Best bytes/s of a float32 sum over `num_bytes`, over repeats that fit a small budget."""
    x = torch.ones(num_bytes // 4, dtype=torch.float32, device=device)
    reduce = functools.partial(torch.sum, x)
    best_s = spent = 0.0
    for i in range(repeats):
        elapsed = _timed(device, reduce)
        best_s = elapsed if i == 0 else min(best_s, elapsed)
        spent += elapsed
        if spent > _READ_BUDGET_S and i >= 2:
            break
    return x.numel() * x.element_size() / best_s


def measure_stream_bw_bytes_per_s(num_bytes: int, hidden: int = 1024) -> float | None:
    """Bytes/s of one-row matmuls over a stack of decoder-shaped weights (`num_bytes` in all),
    through the engine's kernel, on a worker thread as the engine's step loop runs: the
    rate decode at batch 1 can sustain, op launches included. Best of a few passes."""
    import threading

    from engines.reference.cpu_layout import PackedLinear, can_pack

    if not can_pack(torch.float32):
        return None
    shapes = [(3 * hidden, hidden), (hidden, hidden), (8 * hidden, hidden), (hidden, 4 * hidden)]
    per_layer = sum(o * i * 4 for o, i in shapes)
    layers = max(1, num_bytes // per_layer)
    linears = [PackedLinear(torch.nn.Linear(i, o, bias=False)) for _ in range(layers) for o, i in shapes]
    inputs = {i: torch.randn(1, i) for _, i in shapes}
    times: list[float] = []

    def passes() -> None:
        with torch.inference_mode():
            for _ in range(4):
                start = time.perf_counter()
                for m in linears:
                    m(inputs[m.in_features])
                times.append(time.perf_counter() - start)

    worker = threading.Thread(target=passes, name="llmperf-probe")
    worker.start()
    worker.join()
    return layers * per_layer / min(times[1:])


def measure_layer_overhead_s() -> float:
    """Median decode step of the `tiny` preset (weights in cache, batch 1), per layer, with
    the step loop on its own thread as in a run."""
    from engines.reference import ReferenceEngine

    with ReferenceEngine(model="tiny", batching="sequential", max_num_seqs=1, max_model_len=128) as eng:
        eng.start()
        eng.generate([list(range(3, 35))], max_tokens=24, ignore_eos=True)
    steps = sorted(s.duration_s for s in eng.step_stats() if s.kind == "decode")
    return steps[len(steps) // 2] / eng.config.num_hidden_layers


def measure_matmul_flops(
    device: str, dtype: torch.dtype, budget_s: float = _MATMUL_BUDGET_S
) -> float:
    """Best FLOP/s of an n x n matmul, n doubled from 512 until a run takes >= 20 ms."""
    n = 512
    while True:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        matmul = _engine_matmul(device, a, b)
        _timed(device, matmul)  # first call pays for kernel selection and page faults
        elapsed = _timed(device, matmul)
        if elapsed >= _MIN_TIMED_S or n >= _MAX_MATMUL_N[device]:
            break
        n *= 2
    best_s, spent = elapsed, 0.0
    while spent < budget_s:
        elapsed = _timed(device, matmul)
        best_s, spent = min(best_s, elapsed), spent + elapsed
    return 2.0 * n**3 / best_s


def _engine_matmul(device: str, a: torch.Tensor, b: torch.Tensor):
    """a @ b^T as the reference engine's linear layers compute it on this device."""
    from engines.reference.cpu_layout import can_pack

    if device == "cpu" and can_pack(a.dtype):
        packed = torch.ops.mkldnn._reorder_linear_weight(b, a.shape[0])
        return functools.partial(torch.ops.mkldnn._linear_pointwise, a, packed, None, "none", [], "")
    return functools.partial(torch.nn.functional.linear, a, b)


def _timed(device: str, fn) -> float:
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _parse_size(text: str) -> int:
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    if text and text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # absent or unreadable: measure again
    return data if isinstance(data, dict) else {}


def _write_cache(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)  # atomic, so concurrent runs never read half a file
