"""Servers llmperf starts, watches and stops itself (`engine=openai engine.launch=vllm`).

`options.py` holds the options, `family.py` what every server family shares, one file per
family (`vllm.py`, `sglang.py`, `llama_cpp.py`, `llmperf_serve.py`, `generic.py`), and
`server.py` the process's lifecycle: start, readiness, version, log, stop.
"""

from engines.launch.options import LaunchOptions
from engines.launch.server import LaunchError, ManagedServer

__all__ = ["LaunchError", "LaunchOptions", "ManagedServer"]
