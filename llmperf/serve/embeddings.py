"""/v1/embeddings: a deterministic embedding of the prompt's token ids.

Not the model's hidden states: each token id has a fixed unit vector (normal draws seeded by
the id), and the prompt's embedding is their mean, normalized to length 1. So the same
input always gets the same vector on every server and every run, the endpoint's cost is the
HTTP path and the tokenizer (what a benchmark of an embedding client measures here), and a
test can compute the expected vector independently.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from engines.base import Tokenizer
from llmperf.serve.protocol import Limits, OpenAIError, check_model, prompt_token_ids

EMBEDDING_DIMS = 64


@lru_cache(maxsize=65536)
def token_vector(token_id: int) -> np.ndarray:
    v = np.random.default_rng(token_id).standard_normal(EMBEDDING_DIMS)
    return v / np.linalg.norm(v)


def embed(token_ids: list[int]) -> list[float]:
    mean = np.mean([token_vector(t) for t in token_ids], axis=0)
    return (mean / np.linalg.norm(mean)).tolist()


def parse_embedding(body: dict, served_model: str, tokenizer: Tokenizer, limits: Limits) -> tuple[str, list[int]]:
    """(model, prompt token ids) of an embeddings request: one input, a string or token ids."""
    model = check_model(body, served_model)
    if body.get("encoding_format") not in (None, "float"):
        raise OpenAIError("only encoding_format float is supported", param="encoding_format")
    ids = prompt_token_ids(body.get("input"), tokenizer, "input")
    if not ids:
        raise OpenAIError("the input is empty", param="input")
    bad = next((t for t in ids if not 0 <= t < limits.vocab_size), None)
    if bad is not None:
        raise OpenAIError(f"token id {bad} is outside the vocabulary (size {limits.vocab_size})",
                          param="input")
    if len(ids) > limits.max_context_tokens:
        raise OpenAIError(
            f"the input has {len(ids)} tokens; this model takes at most {limits.max_context_tokens}",
            param="input", code="context_length_exceeded")
    return model, ids


def embedding_response(model: str, token_ids: list[int]) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": embed(token_ids)}],
        "model": model,
        "usage": {"prompt_tokens": len(token_ids), "total_tokens": len(token_ids)},
    }
