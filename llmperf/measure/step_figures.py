"""Figures of a run's steps.jsonl. Each takes the rows of steps.jsonl (plain dicts; the gate
passes the measured window's, warmup steps left out). All but the decode_*_p10_s times count
work, not time, so a busy machine does not move them."""

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


def kv_blocks_peak(steps: list[dict]) -> float:
    return float(max(s.get("kv_blocks_used", 0) for s in steps))


def _decode_p10(steps: list[dict], key: str) -> float:
    values = sorted(s[key] for s in steps if s.get("kind") == "decode")
    if not values:
        raise KeyError("a decode step")
    at = 0.1 * (len(values) - 1)
    low = int(at)
    high = min(low + 1, len(values) - 1)
    return values[low] + (values[high] - values[low]) * (at - low)


def decode_step_p10_s(steps: list[dict]) -> float:
    """10th percentile of the pure decode steps' durations: the engine's speed when nothing
    else ran on its cores. On a shared machine most steps are stretched now and then by a
    neighbour; the fastest tenth are not, and a uniform slowdown moves them all the same."""
    return _decode_p10(steps, "duration_s")


def decode_cpu_p10_s(steps: list[dict]) -> float:
    """10th percentile of the CPU time (all the process's threads) of the pure decode steps:
    what the step cost, less of what the neighbours took from it while it waited."""
    if any(s.get("cpu_s") is None for s in steps):
        raise KeyError("cpu_s")
    return _decode_p10(steps, "cpu_s")
