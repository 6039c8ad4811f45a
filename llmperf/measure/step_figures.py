"""Figures of a run's steps.jsonl: counts of work, not times, so a busy machine does not move
them. Each takes the rows of steps.jsonl (plain dicts; warmup steps included)."""

from __future__ import annotations


def _tokens(step: dict) -> int:
    return step["num_prefill_tokens"] + step["num_decode_tokens"]


def steps_count(steps: list[dict]) -> float:
    return float(len(steps))


def tokens_per_step(steps: list[dict]) -> float:
    return sum(_tokens(s) for s in steps) / len(steps)


def seqs_per_step(steps: list[dict]) -> float:
    return sum(s["num_seqs"] for s in steps) / len(steps)


def padded_fraction(steps: list[dict]) -> float:
    """Padded slots over all slots computed: the share of compute static batching wastes."""
    padded = sum(s.get("padded_tokens", 0) for s in steps)
    computed = padded + sum(_tokens(s) for s in steps)
    return padded / computed if computed else 0.0


def preemptions(steps: list[dict]) -> float:
    return float(sum(s.get("preemptions", 0) for s in steps))
