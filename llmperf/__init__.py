"""llmperf: benchmarking and performance analysis for LLM inference."""

__version__ = "0.1.0"
