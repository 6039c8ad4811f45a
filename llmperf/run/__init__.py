"""The run: its config schema, the stages of one benchmark run, the console and the sweep callback."""
