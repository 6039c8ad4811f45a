"""Telemetry sources by name, and how `auto` picks among them."""

from __future__ import annotations

from collections.abc import Callable

from llmperf.registry import Registry
from llmperf.telemetry.nvml import NvmlSampler
from llmperf.telemetry.process import ProcessSampler
from llmperf.telemetry.sample import Sampler, SamplerUnavailable
from llmperf.telemetry.torch_cuda import TorchCudaSampler

SamplerFactory = Callable[[list[int] | None], Sampler]  # device_indices -> sampler

AUTO = "auto"

SAMPLERS: Registry[SamplerFactory] = Registry(
    "telemetry source",
    {
        "nvml": lambda device_indices: NvmlSampler(device_indices),
        "torch_cuda": lambda device_indices: TorchCudaSampler(device_indices),
        "process": lambda device_indices: ProcessSampler(),
    },
    also_valid=(AUTO,),
)

# What `auto` tries, in order. NVML sees the whole device; torch.cuda sees what the
# caching allocator holds, which NVML cannot, so auto keeps every one that opens.
DEVICE_SOURCES = ("nvml", "torch_cuda")


def validate_source(source: str) -> None:
    if source != AUTO:
        SAMPLERS.get(source)


def open_samplers(
    source: str, device_indices: list[int] | None
) -> tuple[list[Sampler], dict[str, str]]:
    """Open the samplers `source` asks for, plus the process sampler; also return the skipped ones.

    A source named explicitly must open (SamplerUnavailable otherwise); under
    `auto` an absent source is skipped with its reason. A device index out of
    range raises ValueError.
    """
    validate_source(source)
    names = list(DEVICE_SOURCES) if source == AUTO else [source]
    if "process" not in names:
        names.append("process")
    opened: list[Sampler] = []
    skipped: dict[str, str] = {}
    for name in names:
        sampler = SAMPLERS[name](device_indices)
        try:
            sampler.open()
        except SamplerUnavailable as e:
            if name == source:
                for other in opened:
                    other.close()
                raise SamplerUnavailable(f"telemetry source {name!r} is unavailable: {e}") from e
            skipped[name] = str(e)
            continue
        except ValueError:
            for other in opened:
                other.close()
            raise
        opened.append(sampler)
    return opened, skipped
