"""`llmperf-selfcheck --gpu`: what this machine's GPU and the reference engine do on it, as JSON.

Each figure is one named check in `gpu.CHECKS`; on a machine without CUDA every
figure reads "skipped: no GPU" and the command still succeeds.
"""
