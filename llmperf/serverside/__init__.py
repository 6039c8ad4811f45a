"""The server's own account of a run: its Prometheus /metrics scraped while the load runs,
the window's histogram and counter deltas, and the split of client latency into server
queue, prefill, decode and client/network overhead."""
