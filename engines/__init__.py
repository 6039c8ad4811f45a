"""Inference engines llmperf can drive: the reference engine and its peers."""
