"""Speculative decoding's figures over the measured window, from vLLM's counters.

vLLM (v1) counts, per engine: drafts proposed (`vllm:spec_decode_num_drafts`), draft tokens
proposed (`..._num_draft_tokens`) and draft tokens accepted (`..._num_accepted_tokens`).
Over the window, as vLLM's own log line computes them:

    acceptance rate       accepted tokens / draft tokens
    mean accepted length  1 + accepted tokens / drafts   (the target model's own token
                          counts once per step, each accepted draft token on top of it)
"""

from __future__ import annotations

from typing import Any


def spec_decode_figures(window: dict[str, Any]) -> dict[str, float]:
    """The two figures from the window's counter differences; {} without drafts."""
    drafts = window.get("server_spec_decode_drafts")
    draft_tokens = window.get("server_spec_decode_draft_tokens")
    accepted = window.get("server_spec_decode_accepted_tokens")
    out: dict[str, float] = {}
    if draft_tokens and accepted is not None:
        out["server_spec_decode_acceptance_rate"] = accepted / draft_tokens
    if drafts and accepted is not None:
        out["server_spec_decode_mean_accepted_length"] = 1.0 + accepted / drafts
    return out
