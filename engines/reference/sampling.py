"""Picking the next token: greedy, or seeded temperature / top-k / top-p sampling."""

from __future__ import annotations

import torch

from engines.base import SamplingParams


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None]) -> list[int]:
    """logits: float32 [num_seqs, vocab] -> one token id per row."""
    greedy = logits.argmax(dim=-1)
    tokens = greedy.tolist()
    for i, p in enumerate(params):
        if p.temperature > 0:
            tokens[i] = sample_one(logits[i], p, generators[i])
    return tokens


def sample_one(logits: torch.Tensor, p: SamplingParams, generator: torch.Generator | None) -> int:
    logits = logits / p.temperature
    if p.top_k > 0:
        kth = torch.topk(logits, min(p.top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if p.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Keep the smallest prefix whose mass reaches top_p (the top token always stays).
        drop = probs.cumsum(-1) - probs >= p.top_p
        logits = logits.scatter(0, order[drop], float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return int(torch.multinomial(probs.cpu(), 1, generator=generator).item())
