"""Hardware profiles: what a device could do (peak bandwidth, FLOP/s) and what it costs."""
