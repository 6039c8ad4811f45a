"""Servers llmperf starts, watches and stops itself (`engine=openai engine.launch=vllm`).

`options.py` holds the options, `family.py` what every server family shares, one file per
family (`vllm.py`, `sglang.py`, `llama_cpp.py`, `llmperf_serve.py`, `generic.py`), and
`server.py` the process's lifecycle: start, readiness, version, log, stop. Nothing is
imported here, so the config schema can read the options without loading an HTTP client.
"""
