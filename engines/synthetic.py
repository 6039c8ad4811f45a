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
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from engines.base import EngineCapabilities, Request, TokenEvent
from engines.synthetic_options import SyntheticEngineConfig


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
    capabilities = EngineCapabilities()
    max_model_len = 1 << 16  # no model, no context limit; what llmperf-serve admits

    def __init__(
        self, model: str = "synthetic", options: SyntheticEngineConfig | None = None, **overrides: Any
    ) -> None:
        opts = replace(options or SyntheticEngineConfig(), **overrides)
        self.opts = opts
        self.model = model
        self.ttft_s = opts.ttft_s
        self.prefill_s_per_token = opts.prefill_s_per_token
        self.tpot_s = opts.tpot_s
        self.jitter = opts.jitter
        self.max_concurrency = opts.max_concurrency
        self.seed = opts.seed
        self.reasoning_tokens = opts.reasoning_tokens
        self._tokenizer = ByteTokenizer()
        self._rng = np.random.default_rng(opts.seed)
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
            "options": {k: v for k, v in asdict(self.opts).items() if k != "name"},
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
    # Again until the deadline has passed: uvloop's timers count whole milliseconds of a clock
    # read once per loop iteration, so a sleep may end up to a millisecond early.
    while (delay_s := deadline_s - time.perf_counter()) > 0:
        await asyncio.sleep(delay_s)
