"""The collector: a daemon thread that reads every open sampler once per interval during a run."""

from __future__ import annotations

import csv
import math
import threading
import time
from os import PathLike
from typing import Any

from llmperf.telemetry.sample import Sample, Sampler
from llmperf.telemetry.sources import open_samplers, validate_source
from llmperf.telemetry.summary import columns_of, summarize


def _format(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return ""
    # Byte counts and clocks are integers; write them without a trailing ".0".
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


class Collector:
    """Samples telemetry every `interval_s` seconds between `start()` and `stop()`.

    The arguments are llmperf.run.config.TelemetryConfig's. A collector serves one run
    at a time; starting it again starts a fresh set of samples.
    """

    def __init__(
        self, interval_s: float = 0.1, source: str = "auto", device_indices: list[int] | None = None
    ) -> None:
        if not interval_s > 0:
            raise ValueError(f"telemetry interval_s must be > 0, got {interval_s}")
        validate_source(source)
        self.interval_s = interval_s
        self.source = source
        self.device_indices = device_indices
        self.t0: float | None = None  # perf_counter() origin of the samples' timestamps
        self._samplers: list[Sampler] = []
        self._skipped: dict[str, str] = {}
        self._read_errors: dict[str, str] = {}
        self._samples: list[Sample] = []
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu_s = 0.0  # the sampling thread's own CPU time (time.thread_time) this run

    @property
    def sources_used(self) -> list[str]:
        return [sampler.name for sampler in self._samplers]

    def start(self, t0: float | None = None) -> None:
        """Open the samplers (choosing the source once) and start sampling.

        `t0` is the run's start as a perf_counter() value; sample timestamps are
        seconds since it. None: now.
        """
        if self._thread is not None:
            raise RuntimeError("collector already started")
        self._samplers, self._skipped = open_samplers(self.source, self.device_indices)
        self.t0 = time.perf_counter() if t0 is None else t0
        self._samples, self._read_errors, self._cpu_s = [], {}, 0.0
        self._stop_event.clear()
        self._thread = threading.Thread(target=self._run, name="llmperf-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> list[Sample]:
        """Stop sampling (after one closing sample) and return every sample taken."""
        if self._thread is not None:
            self._stop_event.set()
            self._thread.join()
            self._thread = None
        return list(self._samples)

    def rebase(self, t0: float) -> None:
        """Move the samples' timestamps (and later ones) onto a clock starting at perf_counter() `t0`."""
        shift = self.t0 - t0
        self._samples = [Sample(s.timestamp_s + shift, s.values) for s in self._samples]
        self.t0 = t0

    @property
    def samples(self) -> list[Sample]:
        return list(self._samples)

    @property
    def cpu_s(self) -> float:
        """CPU seconds the sampling thread itself used (reads and bookkeeping), once stopped."""
        return self._cpu_s

    def _run(self) -> None:
        cpu0_s = time.thread_time()
        try:
            next_s = time.perf_counter()
            while True:
                self._take_sample()
                next_s += self.interval_s
                now_s = time.perf_counter()
                if now_s > next_s:
                    # A slow read: skip the ticks it overran rather than sample in a burst.
                    next_s += math.ceil((now_s - next_s) / self.interval_s) * self.interval_s
                if self._stop_event.wait(next_s - now_s):
                    break
            # A closing reading, so energy and peaks cover the run up to stop().
            self._take_sample()
        finally:
            for sampler in self._samplers:
                try:
                    sampler.close()
                except Exception as e:  # closing must not end the run
                    self._read_errors.setdefault(sampler.name, f"close failed: {e}")
            self._cpu_s = time.thread_time() - cpu0_s

    def _take_sample(self) -> None:
        timestamp_s = time.perf_counter() - self.t0
        values: dict[str, float] = {}
        for sampler in self._samplers:
            try:
                values.update(sampler.read())
            except Exception as e:  # a failing source never ends the run
                self._read_errors.setdefault(sampler.name, f"read failed: {e!r}")
        self._samples.append(Sample(timestamp_s, values))

    def write_csv(self, path: str | PathLike[str]) -> None:
        """telemetry.csv: `timestamp_s`, then one column per value; empty where not read."""
        samples = self.samples
        columns = columns_of(samples)
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["timestamp_s", *columns])
            for sample in samples:
                row = [f"{sample.timestamp_s:.6f}"]
                row += [_format(sample.values.get(column)) for column in columns]
                writer.writerow(row)

    def unavailable(self) -> list[str]:
        """'what: why' for every source skipped and every field dropped or failing."""
        notes = {**self._skipped}
        for sampler in self._samplers:
            # list() copies in one step: the collector thread may be adding a dropped field.
            dropped = list(sampler.unavailable.items())
            notes.update({f"{sampler.name}.{name}": why for name, why in dropped})
        notes.update(self._read_errors)
        return [f"{what}: {why}" for what, why in sorted(notes.items())]

    def summarize(self, start_s: float | None = None, end_s: float | None = None) -> dict[str, Any]:
        """Flat summary.json keys over samples in [start_s, end_s] (seconds from t0; None: open)."""
        summary = {
            "telemetry_source": "+".join(self.sources_used),
            "telemetry_interval_s": self.interval_s,
            "telemetry_collector_cpu_s": self._cpu_s,
            # Per sample taken (the window's and the rest of the run's): a run's length drops out.
            "telemetry_collector_cpu_per_sample_s": self._cpu_s / len(self._samples) if self._samples else None,
            **summarize(self.samples, start_s, end_s),
            "telemetry_unavailable": self.unavailable(),
        }
        return summary
