"""Each stage's figures (`scenario.stages`), for summary.json's `stages` list.

A stage's figures are the run's figures (`compute_metrics`) over the measured requests the
stage sent (`RequestRecord.stage`), with its window from its first arrival to its last end,
beside the rate it asked and the rate the load generator offered (steady.py's
`offered_rate_metrics`, the stage's rate standing for the arrival's). A stage the
saturation detector stopped is marked `saturated`, and no later stage ran.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from llmperf.measure.metrics import compute_metrics
from llmperf.measure.pacing import StageSpan
from llmperf.measure.records import RequestRecord
from llmperf.measure.steady import offered_rate_metrics
from llmperf.workload.scenario import ScenarioConfig


def stage_figures(records: list[RequestRecord], scenario: ScenarioConfig,
                  spans: list[StageSpan]) -> list[dict[str, Any]]:
    """One object per stage asked, in order: what it asked, when it ran, its figures. A stage
    that never started (the run stopped before it) has `ran: false` and no figures."""
    capped = scenario.arrival.max_concurrency is not None
    ran = {span.index: span for span in spans}
    out = []
    for index, stage in enumerate(scenario.stages):
        span = ran.get(index)
        entry: dict[str, Any] = {
            "stage": index,
            "load": stage.describe(),
            "rate_rps": stage.rate_rps,
            "concurrency": stage.concurrency,
            "ran": span is not None,
            "saturated": bool(span and span.saturated),
            "start_s": span.start_s if span else None,
            "end_s": span.end_s if span else None,
        }
        if span is not None:
            mine = [r for r in records if r.stage == index]
            arrival = (replace(scenario.arrival, rate_rps=stage.rate_rps)
                       if stage.rate_rps is not None
                       else replace(scenario.arrival, process="closed",
                                    concurrency=stage.concurrency, max_concurrency=None))
            entry.update(compute_metrics(mine, scenario.slo, capped and stage.rate_rps is not None))
            entry.update(offered_rate_metrics(mine, arrival))
        out.append(entry)
    return out


def saturated_stage(stages: list[dict[str, Any]]) -> int | None:
    """The index of the stage the saturation detector stopped, if one was."""
    return next((s["stage"] for s in stages if s.get("saturated")), None)
