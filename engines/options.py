"""What every engine's options dataclass shares.

Each engine declares its options once, as a dataclass beside it (a Hydra
structured config: `scenarios/engine/<name>.yaml` only picks the schema); the
engine is built from that object, and the docs' tables are generated from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING


@dataclass
class EngineConfig:
    name: str = MISSING

    def model_for(self, model: Any) -> str:
        """What the engine takes as `model`, from the run's model selection
        (`llmperf.run.config.ModelSelection`): the checkpoint path if given, else the preset."""
        return model.ref

    def with_model(self, model: Any) -> EngineConfig:
        """These options with what they take from the run's model selection (none by default)."""
        return self

    def copies_serve_alike(self) -> bool:
        """True when a copy of this engine in each load-worker process serves every request as
        one shared engine would (no state between requests): then `scenario.client.workers`
        may build one per worker even though the engine runs in-process."""
        return False

    def metrics_endpoint(self) -> str | None:
        """The server's Prometheus /metrics to scrape while the load runs; None: no server."""
        return None

    def round_trip_endpoint(self) -> str | None:
        """A cheap GET on the server, timed beside each scrape as its HTTP round trip (the
        transport part of the latency split); None: not timed."""
        return None
