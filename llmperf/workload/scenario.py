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
from llmperf.workload.datasets import DATASET_FORMATS, DatasetColumns
from llmperf.workload.images import ImageConfig
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
    max_clock_uncertainty_s: float = option(0.001, "backend=ray: how far a worker's schedule may sit off the coordinator's clock (offset left, its uncertainty and drift)")

    def __post_init__(self) -> None:
        check_positive(self, "min_duration_s", "min_completed", allow_none=False, strict=False)
        check_positive(self, "max_client_delay_s", "max_client_cpu_share", "max_delay_share_of_ttft",
                       "max_clock_uncertainty_s", allow_none=False)
        for name in ("max_error_rate", "max_late_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(name, getattr(self, name), "must be in [0, 1]")


@dataclass
class StageConfig:
    """One entry of `scenario.stages`: a load (a rate or a concurrency) and how long it lasts."""

    rate_rps: float | None = option(None, "an open loop at this rate, by scenario.arrival.process (constant, poisson or gamma)")
    concurrency: int | None = option(None, "a closed loop with this many requests in flight")
    duration_s: float | None = option(None, "the stage sends for this long")
    num_requests: int | None = option(None, "the stage sends this many requests")

    def __post_init__(self) -> None:
        check_positive(self, "rate_rps", "concurrency", "duration_s", "num_requests")
        if (self.rate_rps is None) == (self.concurrency is None):
            raise ConfigError("rate_rps", self.rate_rps, "a stage takes one of rate_rps or concurrency")
        if (self.duration_s is None) == (self.num_requests is None):
            raise ConfigError("duration_s", self.duration_s, "a stage takes one of duration_s or num_requests")

    def describe(self) -> str:
        load = f"{self.rate_rps:g} req/s" if self.rate_rps is not None else f"concurrency {self.concurrency}"
        span = f"{self.duration_s:g} s" if self.duration_s is not None else f"{self.num_requests} requests"
        return f"{load} for {span}"


STAGE_PROCESSES = ("constant", "poisson", "gamma")  # the processes a stage's rate drives


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
    dataset: str | None = option(None, "a conversation dataset, for dist: dataset: a json, jsonl, parquet or arrow file, or a Hub name")
    dataset_format: str = option("auto", "sharegpt (a JSON list or JSONL), table (a file or Hub name, through the datasets library) or auto (sharegpt for a .json or .jsonl file with no column mapped)")
    dataset_columns: DatasetColumns = option(help="which column holds the prompt, the output and the turns (table)", factory=DatasetColumns)
    slo: SloConfig = option(help="per-request SLO targets", factory=SloConfig)
    ignore_eos: bool = option(True, "outputs run to their scheduled length")
    temperature: float = option(0.0, "sampling temperature; 0 is greedy")
    validity: ValidityConfig = option(help="what a run must reach to be valid", factory=ValidityConfig)
    saturation: SaturationConfig = option(help="the over-saturation detector", factory=SaturationConfig)
    prefix: PrefixConfig = option(help="synthetic shared prefixes", factory=PrefixConfig)
    sessions: SessionConfig = option(help="multi-turn sessions", factory=SessionConfig)
    images: ImageConfig = option(help="images sent with each prompt (llmperf/workload/images.py)", factory=ImageConfig)
    record_tokens: bool = option(False, "requests.jsonl keeps each request's prompt and output token ids")
    client: ClientConfig = option(help="the load generator's processes", factory=ClientConfig)
    stages: list[StageConfig] = option(help="one run steps through these loads, each with its own figures: [{rate_rps: 2, duration_s: 10}, {concurrency: 8, num_requests: 64}]; replaces num_requests, duration_s and the arrival's rate or concurrency", factory=list)

    def __post_init__(self) -> None:
        self._check_stages()
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
        if self.images.count and self.sessions.turns:
            raise ConfigError("images.count", self.images.count, "images go with single-turn requests, not sessions")
        if self.sessions.turns and self.arrival.process == "trace":
            raise ConfigError("sessions.turns", self.sessions.turns, "a trace is replayed as it is")
        self._check_workers()
        if self.dataset_columns.mapped and self.dataset_format == "sharegpt":
            raise ConfigError("dataset_format", self.dataset_format,
                              "a ShareGPT file has no columns to map; use table (or auto)")
        columns = self.dataset_columns
        if (columns.prompt and not columns.output and not columns.turns
                and self.output_tokens.dist == "dataset"):
            raise ConfigError("dataset_columns.output", None,
                              "output_tokens.dist: dataset needs the output column (or turns)")
        if self.dataset and not uses_dataset:
            raise ConfigError(
                "dataset",
                self.dataset,
                "unused: set prompt_tokens.dist or output_tokens.dist to dataset",
            )

    def _check_stages(self) -> None:
        """What a cap and stages cannot mix with: both are paced by one process, request by
        request."""
        capped = self.arrival.max_concurrency is not None
        if capped and self.sessions.turns:
            raise ConfigError("arrival.max_concurrency", self.arrival.max_concurrency,
                              "sessions are capped by sessions.max_concurrent")
        if self.stages:
            self.stages = [StageConfig(**s) if isinstance(s, dict) else s for s in self.stages]
            if self.sessions.turns:
                raise ConfigError("sessions.turns", self.sessions.turns,
                                  "stages send single requests, not sessions")
            if any(s.rate_rps is not None for s in self.stages) and self.arrival.process not in STAGE_PROCESSES:
                raise ConfigError("arrival.process", self.arrival.process,
                                  "a stage's rate drives a constant, poisson or gamma process",
                                  STAGE_PROCESSES)
        if (capped or self.stages) and self.client.workers > 1:
            raise ConfigError("client.workers", self.client.workers, "stages and"
                              " arrival.max_concurrency are paced by one load-generator process")

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
