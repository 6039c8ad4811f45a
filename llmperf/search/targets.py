"""The SLOs a capacity search holds a trial to, parsed from `slo.<metric>_<stat>_s=<limit>`
and `slo.attainment=<fraction>` on the command line.

A trial meets the SLOs when every percentile target holds on the run's figures (e.g.
`ttft_s.p99 <= 0.5`) and, with an attainment given, when at least that fraction of the
measured requests meets every per-request limit at once (TTFT, TPOT, E2E; the run's
`slo_attainment`). ITL has no per-request value, so it takes part in the percentiles only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from llmperf.errors import UsageError
from llmperf.run.config import SloConfig

METRICS = ("ttft", "tpot", "itl", "e2e")  # per-request latencies in summary.json, <name>_s
PER_REQUEST = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}  # fields of SloConfig
STATS = ("mean", "median", "p90", "p95", "p99", "max")
_KEY = re.compile(r"^(?P<metric>[a-z0-9]+)_(?P<stat>[a-z0-9]+)_s$")


@dataclass(frozen=True)
class Target:
    metric: str  # ttft, tpot, itl, e2e
    stat: str  # p99, median, ...
    limit_s: float

    @property
    def key(self) -> str:
        return f"{self.metric}_{self.stat}_s"

    def value(self, summary: dict[str, Any]) -> float | None:
        return (summary.get(f"{self.metric}_s") or {}).get(self.stat)


@dataclass(frozen=True)
class SloTargets:
    targets: tuple[Target, ...]
    attainment: float | None = None

    def per_request(self) -> SloConfig:
        """The per-request limits a trial's run judges each request by (its goodput)."""
        limits: dict[str, float] = {}
        for t in self.targets:
            name = PER_REQUEST.get(t.metric)
            if name is not None:
                limits[name] = min(t.limit_s, limits.get(name, t.limit_s))
        return SloConfig(**limits)

    def margin(self, summary: dict[str, Any]) -> tuple[bool, float, list[str]]:
        """(met, score, misses): score > 0 is headroom, < 0 how far past the worst limit,
        as a fraction of it; misses says which target failed and by how much."""
        scores, misses = [], []
        for t in self.targets:
            value = t.value(summary)
            if value is None:
                scores.append(-1.0)
                misses.append(f"{t.key}: no value (no completed request)")
                continue
            scores.append(1.0 - value / t.limit_s)
            if value > t.limit_s:
                misses.append(f"{t.key} = {value:.4g} s > {t.limit_s:.4g} s")
        if self.attainment is not None:
            got = summary.get("slo_attainment") or 0.0
            scores.append((got - self.attainment) / max(1.0 - self.attainment, 1e-6))
            if got < self.attainment:
                misses.append(f"attainment = {got:.2%} < {self.attainment:.2%}")
        return not misses, min(scores), misses

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {t.key: t.limit_s for t in self.targets}
        out["attainment"] = self.attainment
        return out


def parse_targets(assignments: dict[str, str]) -> SloTargets:
    """`assignments` maps the part after `slo.` to its text; bad keys or values raise
    UsageError naming them and the valid choices."""
    targets, attainment = [], None
    for key, text in assignments.items():
        value = _number(f"slo.{key}", text)
        if key == "attainment":
            if not 0.0 < value <= 1.0:
                raise UsageError(f"slo.attainment={text!r}: must be in (0, 1]")
            attainment = value
            continue
        match = _KEY.match(key)
        if match is None:
            raise UsageError(
                f"slo.{key}: not a target; expected slo.<metric>_<stat>_s or slo.attainment, "
                f"e.g. slo.ttft_p99_s=0.5"
            )
        metric, stat = match["metric"], match["stat"]
        if metric not in METRICS:
            raise UsageError(f"slo.{key}: unknown metric {metric!r}; valid: {', '.join(METRICS)}")
        if stat not in STATS:
            raise UsageError(f"slo.{key}: unknown statistic {stat!r}; valid: {', '.join(STATS)}")
        if value <= 0:
            raise UsageError(f"slo.{key}={text!r}: must be > 0")
        targets.append(Target(metric, stat, value))
    if not targets:
        raise UsageError("no SLO given: add at least one target, e.g. slo.ttft_p99_s=0.5")
    if attainment is not None and not any(t.metric in PER_REQUEST for t in targets):
        raise UsageError("slo.attainment needs a per-request target (ttft, tpot or e2e)")
    return SloTargets(tuple(targets), attainment)


def _number(key: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"{key}={text!r}: not a number") from None
