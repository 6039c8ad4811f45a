"""The Hydra callback that ends a sweep with its comparison: sweep.csv and report.html in the
sweep folder (with `report.enabled=false`, sweep.csv alone: it is data, not a report).
Wired in scenarios/config.yaml:

    hydra:
      callbacks:
        sweep_report:
          _target_: llmperf.run.sweep_callback.SweepReport

Hydra builds callbacks when every command starts, so this module imports nothing heavy;
the report code (pandas, matplotlib) loads only when a multirun ends.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


class SweepReport(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Runs on the launching machine once every job has returned (with a cluster launcher
        too). A sweep whose jobs left no summary gets a warning, not a failed command: the
        jobs' folders are what matters, and `llmperf-report SWEEP_DIR` can retry."""
        from llmperf.report.errors import ReportError
        from llmperf.report.sweep import build_sweep_report, open_sweep, write_sweep_csv

        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            if not OmegaConf.select(config, "report.enabled", default=True):
                csv = write_sweep_csv(open_sweep(sweep_dir))
                log.info("sweep figures: %s (report.enabled=false: no report.html)", csv)
                return
            report = build_sweep_report(sweep_dir)
        except ReportError as e:
            log.warning("no sweep report: %s", e)
            return
        log.info("sweep report: %s (figures in %s)", report, report.with_name("sweep.csv"))
