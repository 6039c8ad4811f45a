"""The scenario's options (`scenario.*`): the load, its SLO targets and what makes a run valid.

The arrival and length options sit beside their processes and distributions
(arrivals.py, lengths.py); this dataclass composes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmperf.errors import ConfigError
from llmperf.measure.client_options import ClientConfig
from llmperf.measure.saturation import SaturationConfig
from llmperf.options import check_positive, option
from llmperf.workload.arrivals import ARRIVALS, ArrivalConfig
from llmperf.workload.datasets import DATASET_FORMATS
from llmperf.workload.lengths import LengthConfig
from llmperf.workload.prefixes import PrefixConfig
from llmperf.workload.sessions import SessionConfig


@dataclass
class SloConfig:
    """Per-request targets; a request meets the SLO when it meets every one that is set."""

    ttft_s: float | None = option(None, "time to first token target; null: no target")
    tpot_s: float | None = option(None, "time per output token target; null: no target")
    e2e_s: float | None = option(None, "end-to-end latency target; null: no target")

    def __post_init__(self) -> None:
        check_positive(self, "ttft_s", "tpot_s", "e2e_s")


@dataclass
class ValidityConfig:
    """What a run must reach for its figures to count (see llmperf/measure/validity.py)."""

    min_duration_s: float = option(5.0, "the measured window must last at least this long")
    min_completed: int = option(20, "at least this many measured requests must complete")
    max_error_rate: float = option(0.01, "failed / measured requests may be at most this, in [0, 1]")
    max_client_delay_s: float = option(0.01, "a request is late when its client delay (intended arrival to sent) passes this")
    max_late_fraction: float = option(0.05, "the share of late requests (and of late event-loop wake-ups) the client may have, in [0, 1]")
    max_client_cpu_share: float = option(0.75, "the event loop's share of a core past which the client's own CPU is the limit")
    max_delay_share_of_ttft: float = option(0.05, "on a contended host: mean client delay / mean TTFT past which the delay moved the figures")

    def __post_init__(self) -> None:
        check_positive(self, "min_duration_s", "min_completed", allow_none=False, strict=False)
        check_positive(self, "max_client_delay_s", "max_client_cpu_share", "max_delay_share_of_ttft",
                       allow_none=False)
        for name in ("max_error_rate", "max_late_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(name, getattr(self, name), "must be in [0, 1]")


@dataclass
class ScenarioConfig:
    name: str = option("custom", "the preset's name, for reports")
    seed: int = option(0, "the same seed gives the same requests")
    num_requests: int | None = option(64, "measured requests; null: as many as duration_s allows (or the whole trace)")
    duration_s: float | None = option(None, "stop sending once the measured phase is this old")
    warmup_requests: int = option(2, "sent and awaited before the measured phase; never in the figures")
    arrival: ArrivalConfig = option(help="when requests are sent", factory=ArrivalConfig)
    prompt_tokens: LengthConfig = option(help="prompt lengths", factory=lambda: LengthConfig(value=128))
    output_tokens: LengthConfig = option(help="output lengths", factory=lambda: LengthConfig(value=64))
    dataset: str | None = option(None, "a conversation dataset file, for dist: dataset")
    dataset_format: str = option("sharegpt", "the dataset's format: sharegpt (a JSON list or JSONL)")
    slo: SloConfig = option(help="per-request SLO targets", factory=SloConfig)
    ignore_eos: bool = option(True, "outputs run to their scheduled length")
    temperature: float = option(0.0, "sampling temperature; 0 is greedy")
    validity: ValidityConfig = option(help="what a run must reach to be valid", factory=ValidityConfig)
    saturation: SaturationConfig = option(help="the over-saturation detector", factory=SaturationConfig)
    prefix: PrefixConfig = option(help="synthetic shared prefixes", factory=PrefixConfig)
    sessions: SessionConfig = option(help="multi-turn sessions", factory=SessionConfig)
    record_tokens: bool = option(False, "requests.jsonl keeps each request's prompt and output token ids")
    client: ClientConfig = option(help="the load generator's processes", factory=ClientConfig)

    def __post_init__(self) -> None:
        check_positive(self, "num_requests", "duration_s")
        DATASET_FORMATS.check("dataset_format", self.dataset_format)
        check_positive(self, "warmup_requests", "temperature", allow_none=False, strict=False)
        bounded = self.arrival.process == "trace" or self.num_requests or self.duration_s
        if not bounded:
            raise ConfigError("num_requests", None, "set num_requests or duration_s")
        if self.arrival.process == "offline" and self.num_requests is None:
            raise ConfigError("num_requests", None, "the offline process sends a fixed count")
        uses_dataset = "dataset" in (self.prompt_tokens.dist, self.output_tokens.dist)
        if uses_dataset and not self.dataset:
            raise ConfigError("dataset", self.dataset, "dist: dataset needs a dataset file")
        if self.sessions.turns and ARRIVALS.get(self.arrival.process).closed_loop:
            raise ConfigError(
                "sessions.turns", self.sessions.turns,
                "sessions arrive by an open arrival process (cap them with sessions.max_concurrent)",
            )
        if self.sessions.turns and self.arrival.process == "trace":
            raise ConfigError("sessions.turns", self.sessions.turns, "a trace is replayed as it is")
        self._check_workers()
        if self.dataset and not uses_dataset:
            raise ConfigError(
                "dataset",
                self.dataset,
                "unused: set prompt_tokens.dist or output_tokens.dist to dataset",
            )

    def _check_workers(self) -> None:
        workers = self.client.workers
        if workers == 1:
            return
        if self.sessions.turns:
            raise ConfigError("client.workers", workers, "multi-turn sessions run in one process"
                              " (a turn waits on the reply before it)")
        if ARRIVALS.get(self.arrival.process).closed_loop:
            if self.num_requests is None:
                raise ConfigError("client.workers", workers, "a closed loop over several workers"
                                  " needs num_requests (the requests are split before the run)")
            if self.arrival.concurrency is not None and self.arrival.concurrency < workers:
                raise ConfigError("client.workers", workers,
                                  f"more workers than arrival.concurrency ({self.arrival.concurrency})")
