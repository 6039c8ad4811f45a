"""A simulated inference server, for testing the harness without a model.

It answers each request after a latency model instead of a forward pass:
    first token at  admission + ttft_s + prefill_s_per_token x prompt tokens
    token k (k>=1)  one tpot_s after token k-1
each delay scaled by 1 + jitter x U(-1, 1). The first `reasoning_tokens` tokens of each
output are marked as reasoning content (a thinking model). With `max_concurrency` set, requests
beyond it wait in a FIFO queue (their admission time is when they leave it).
Everything runs on the caller's asyncio loop; with every latency 0 it answers at once.
Deadlines are absolute, so the sleeps' overshoot does not add up over a long output.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from engines.base import Request, TokenEvent


class ByteTokenizer:
    """UTF-8 bytes as tokens 0-255, then BOS (256) and EOS (257)."""

    vocab_size = 258
    eos_token_ids = (257,)

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, token_ids: list[int]) -> str:
        return bytes(t for t in token_ids if t < 256).decode("utf-8", errors="replace")


_OUTPUT_BYTES = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz ", dtype=np.uint8)


class SyntheticEngine:
    name = "synthetic"

    def __init__(
        self,
        model: str = "synthetic",
        ttft_s: float = 0.0,
        prefill_s_per_token: float = 0.0,
        tpot_s: float = 0.0,
        jitter: float = 0.0,
        max_concurrency: int | None = None,
        seed: int = 0,
        reasoning_tokens: int = 0,
    ) -> None:
        if min(ttft_s, prefill_s_per_token, tpot_s) < 0:
            raise ValueError("synthetic latencies must be >= 0")
        if not 0.0 <= jitter < 1.0:
            raise ValueError(f"jitter must be in [0, 1), got {jitter}")
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if reasoning_tokens < 0:
            raise ValueError(f"reasoning_tokens must be >= 0, got {reasoning_tokens}")
        self.reasoning_tokens = reasoning_tokens
        self.model = model
        self.ttft_s = ttft_s
        self.prefill_s_per_token = prefill_s_per_token
        self.tpot_s = tpot_s
        self.jitter = jitter
        self.max_concurrency = max_concurrency
        self.seed = seed
        self._tokenizer = ByteTokenizer()
        self._rng = np.random.default_rng(seed)
        self._slots: asyncio.Semaphore | None = None
        self._running = False

    @property
    def tokenizer(self) -> ByteTokenizer:
        return self._tokenizer

    def start(self) -> None:
        self._running = True

    def stop(self) -> None:
        self._running = False

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.model,
            "options": {
                "ttft_s": self.ttft_s,
                "prefill_s_per_token": self.prefill_s_per_token,
                "tpot_s": self.tpot_s,
                "jitter": self.jitter,
                "max_concurrency": self.max_concurrency,
                "seed": self.seed,
                "reasoning_tokens": self.reasoning_tokens,
            },
        }

    async def stream(self, request: Request) -> AsyncIterator[TokenEvent]:
        if not self._running:
            raise RuntimeError("the synthetic engine is not started")
        num_prompt = len(request.prompt_ids(self._tokenizer))
        if self.max_concurrency is None:
            async for event in self._generate(request, num_prompt):
                yield event
            return
        if self._slots is None:  # made here: a Semaphore binds to the running loop
            self._slots = asyncio.Semaphore(self.max_concurrency)
        async with self._slots:
            async for event in self._generate(request, num_prompt):
                yield event

    async def _generate(self, request: Request, num_prompt: int) -> AsyncIterator[TokenEvent]:
        admitted = time.perf_counter()
        deadline = admitted + self._scaled(self.ttft_s + self.prefill_s_per_token * num_prompt)
        tokens = self._rng.choice(_OUTPUT_BYTES, size=request.max_tokens).tolist()
        for k, token in enumerate(tokens):
            if k:
                deadline += self._scaled(self.tpot_s)
            await _sleep_until(deadline)
            if not self._running:
                yield self._final(request, "abort", num_prompt, k)
                return
            last = k == len(tokens) - 1
            yield TokenEvent(
                request_id=request.id,
                token_ids=(token,),
                time_s=time.perf_counter(),
                text=chr(token),
                finished=last,
                finish_reason="length" if last else None,
                num_prompt_tokens=num_prompt if last else None,
                num_output_tokens=len(tokens) if last else None,
                scheduled_s=admitted if k == 0 else None,
                reasoning=k < self.reasoning_tokens,
            )

    def _scaled(self, delay_s: float) -> float:
        if not self.jitter or not delay_s:
            return delay_s
        return delay_s * (1.0 + self.jitter * self._rng.uniform(-1.0, 1.0))

    @staticmethod
    def _final(request: Request, reason: str, num_prompt: int, num_output: int) -> TokenEvent:
        return TokenEvent(
            request_id=request.id,
            token_ids=(),
            time_s=time.perf_counter(),
            finished=True,
            finish_reason=reason,
            num_prompt_tokens=num_prompt,
            num_output_tokens=num_output,
        )


async def _sleep_until(deadline_s: float) -> None:
    delay_s = deadline_s - time.perf_counter()
    if delay_s > 0:
        await asyncio.sleep(delay_s)
