"""The CI regression gate: compare a run's (or sweep's) figures with a committed baseline.

`llmperf-gate` reads run folders only (summary.json, steps.jsonl, .hydra/overrides.yaml),
so it gates any run the harness wrote, on any machine, without importing an engine.
"""
