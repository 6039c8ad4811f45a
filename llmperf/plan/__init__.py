"""Capacity planning: devices, batch sizes, latency and cost from a model's shape and a hardware profile."""
