"""What a run's tokens cost, in dollars and joules.

The run costs usd_per_hour x duration_s / 3600, duration_s being the measured
window (first measured arrival to last measured token), the window the energy
is measured over too. That cost is shared between prompt (input) and output
tokens by `input_share`:
- with step stats (`step_time`), the share of the steps' time spent on prompt
  tokens: prefill steps count whole, decode steps not at all, and a mixed step
  by its share of prompt tokens (which is its share of matmul FLOPs);
- without them, from the requests' measured times (`request_time`, HTTP
  engines): a request's prefill is its TTFT, its decode the rest of its E2E,
  and the share is sum(TTFT) / sum(E2E) over completed requests (TTFT holds
  any queueing, which is charged to the prompt, as the server spends it);
- with neither, FLOP-weighted (`tokens`): every token, prompt or output, costs
  the same 2 x parameters of matmul FLOPs, so the split is the token split
  (attention ignored) and input and output tokens come out at the same price.
usd_per_1m_tokens is the whole cost over all tokens, whatever the split.

Energy is what the telemetry measured over the same window (the NVML energy
counter, else power integrated over time); all of it is charged to the output
tokens in energy_per_output_token_j, the usual "joules per token" figure.
"""

from __future__ import annotations

from collections.abc import Iterable

from engines.base import StepStat

COST_KEYS = (
    "run_cost_usd",
    "usd_per_1m_input_tokens",
    "usd_per_1m_output_tokens",
    "usd_per_1m_tokens",
    "cost_input_share",
    "cost_split",
    "energy_j",
    "energy_per_output_token_j",
)


def input_share_from_steps(steps: Iterable[StepStat]) -> float | None:
    """Share of the steps' time spent on prompt tokens (None without step time)."""
    prompt_s = total_s = 0.0
    for step in steps:
        total_s += step.duration_s
        if step.num_tokens:
            prompt_s += step.duration_s * step.num_prefill_tokens / step.num_tokens
    return prompt_s / total_s if total_s > 0 else None


def input_share_from_request_times(times: Iterable[tuple[float, float]]) -> float | None:
    """sum(TTFT) / sum(E2E) over (ttft_s, e2e_s) pairs (None without measured time)."""
    prefill_s = total_s = 0.0
    for ttft_s, e2e_s in times:
        prefill_s += ttft_s
        total_s += e2e_s
    return min(1.0, prefill_s / total_s) if total_s > 0 else None


def input_share_from_tokens(input_tokens: int, output_tokens: int) -> float | None:
    """The FLOP-weighted split: each token costs the same matmul FLOPs."""
    total = input_tokens + output_tokens
    return input_tokens / total if total > 0 else None


def cost_summary(
    usd_per_hour: float | None,
    duration_s: float,
    input_tokens: int,
    output_tokens: int,
    *,
    steps: Iterable[StepStat] | None = None,
    request_times: Iterable[tuple[float, float]] | None = None,
    energy_j: float | None = None,
) -> dict[str, float | str | None]:
    """The summary.json cost and energy keys; null where the input they need is missing.

    `request_times`: (ttft_s, e2e_s) of each completed request, used without steps.
    """
    steps = list(steps or [])
    share, split = (input_share_from_steps(steps) if steps else None), "step_time"
    if share is None and request_times is not None:
        share, split = input_share_from_request_times(request_times), "request_time"
    if share is None:
        share, split = input_share_from_tokens(input_tokens, output_tokens), "tokens"
    run_cost = usd_per_hour * duration_s / 3600.0 if usd_per_hour is not None else None
    out: dict[str, float | str | None] = dict.fromkeys(COST_KEYS)
    out["cost_input_share"] = share
    out["cost_split"] = split if share is not None else None
    if run_cost is not None:
        out["run_cost_usd"] = run_cost
        out["usd_per_1m_tokens"] = _per_million(run_cost, input_tokens + output_tokens)
        if share is not None:
            out["usd_per_1m_input_tokens"] = _per_million(run_cost * share, input_tokens)
            out["usd_per_1m_output_tokens"] = _per_million(run_cost * (1 - share), output_tokens)
    if energy_j is not None:
        out["energy_j"] = float(energy_j)
        out["energy_per_output_token_j"] = energy_j / output_tokens if output_tokens else None
    return out


def _per_million(usd: float, tokens: int) -> float | None:
    return usd / tokens * 1e6 if tokens > 0 else None
