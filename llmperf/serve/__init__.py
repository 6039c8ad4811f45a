"""llmperf-serve: an OpenAI-compatible HTTP server over a local engine (see docs/peers.md)."""
