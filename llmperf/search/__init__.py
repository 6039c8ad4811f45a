"""Capacity search: the highest request rate (or concurrency) that still meets the SLOs."""
