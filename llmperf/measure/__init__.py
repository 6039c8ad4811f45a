"""The measurement: the load generator, request records, metrics, validity checks and the run-folder reader."""
