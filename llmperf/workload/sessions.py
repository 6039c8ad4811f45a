"""Multi-turn sessions: what each turn's user says, how long its reply may be, and how long
the user thinks before the next turn. The history (earlier prompts and the engine's real
replies) is added by the load generator as the session runs (llmperf/measure/sessions.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from llmperf.options import check_choice, check_positive, option

THINK_TIMES = ("fixed", "exponential", "uniform")


@dataclass
class SessionConfig:
    """`scenario.sessions`: multi-turn sessions. The arrival process starts sessions; each
    turn's prompt is the session's earlier prompts and replies, then the new user message."""

    turns: int = option(0, "0: single requests; n: n turns a session (a dataset: its own turns, at most n)")
    think_time: str = option("exponential", "fixed | exponential | uniform: seconds between a reply and the next turn")
    think_time_s: float = option(1.0, "fixed: the value; exponential: the mean; uniform: 0..2x the mean")
    max_concurrent: int | None = option(None, "sessions open at once; more wait for a free slot")
    max_context_tokens: int | None = option(None, "a session ends before a turn that would not fit")

    def __post_init__(self) -> None:
        check_positive(self, "turns", allow_none=False, strict=False)
        check_positive(self, "think_time_s", allow_none=False, strict=False)
        check_positive(self, "max_concurrent", "max_context_tokens")
        check_choice("think_time", self.think_time, THINK_TIMES, "think-time distribution")


@dataclass
class Turn:
    user_token_ids: list[int]  # the new user message (the first turn: after any shared prefix)
    max_tokens: int
    think_time_s: float  # after this turn's reply, before the next turn is sent


@dataclass
class Session:
    id: str
    arrival_s: float  # intended arrival of its first turn, from the measured phase's start
    turns: list[Turn]
    prefix_token_ids: list[int] = field(default_factory=list)  # a shared system prompt, if any
    shared_prefix_tokens: int = 0  # of the prefix, tokens an earlier session already sent


def think_time_s(config: SessionConfig, rng: np.random.Generator) -> float:
    """One think time: `fixed` is think_time_s; `exponential` has that mean; `uniform` is
    drawn from 0 to twice it (the same mean)."""
    mean_s = config.think_time_s
    if config.think_time == "fixed" or mean_s == 0:
        return mean_s
    if config.think_time == "exponential":
        return float(rng.exponential(mean_s))
    return float(rng.uniform(0.0, 2.0 * mean_s))
