"""Telemetry: what the hardware and the process did while a run's load ran.

A `Collector` thread reads the open samplers (NVML, torch.cuda, process) once
per interval, writes telemetry.csv and adds peak/mean figures, energy and
throttling to summary.json. Nothing here touches a device at import time.
"""

from llmperf.telemetry.collector import Collector
from llmperf.telemetry.sample import Sample, Sampler, SamplerUnavailable
from llmperf.telemetry.sources import SAMPLERS
from llmperf.telemetry.summary import summarize

__all__ = [
    "SAMPLERS",
    "Collector",
    "Sample",
    "Sampler",
    "SamplerUnavailable",
    "summarize",
]
