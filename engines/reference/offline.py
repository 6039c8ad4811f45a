"""The offline API on top of the streaming engine: generate() and logits().

`generate` submits every prompt and waits: on the engine's thread when it was
started, else by driving the step loop in the caller's thread. `logits` runs one
full-prompt forward through the KV cache, outside the scheduler.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch

from engines.base import Request, SamplingParams, TokenEvent
from engines.reference.scheduler import ScheduledSeq
from engines.reference.sequence import Sequence


@dataclass
class GenerationOutput:
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    finish_reason: str | None
    text: str | None = None
    num_preemptions: int = 0
    num_cached_prompt_tokens: int = 0


@dataclass
class _Pending:
    """A generate() request awaited by the caller's thread."""

    seq: Sequence
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None


class OfflineAPI:
    """Mixed into ReferenceEngine: uses its tokenizer, sequences, KV cache, runner and loop."""

    def generate(
        self,
        prompts: list[list[int]] | list[str],
        max_tokens: int = 16,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int | None = None,
        ignore_eos: bool = False,
    ) -> list[GenerationOutput]:
        pending = []
        for i, prompt in enumerate(prompts):
            sampling = SamplingParams(
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                seed=None if seed is None else seed + i,
                ignore_eos=ignore_eos,
            )
            ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
            request = Request(id=f"gen-{next(self._ids)}", max_tokens=max_tokens, prompt_token_ids=ids, sampling=sampling)
            p = _Pending(seq=None)  # type: ignore[arg-type]
            p.seq = self._make_job(request, lambda ev, p=p: self._on_generate_event(p, ev))
            pending.append(p)
        for p in pending:
            self._submit(p.seq)
        self.flush()
        if self._thread is not None:  # the running loop serves them
            for p in pending:
                p.done.wait()
        else:  # drive the steps from this thread
            while not all(p.done.is_set() for p in pending):
                if not self._step_once():
                    raise RuntimeError("the engine stalled with unfinished requests")
        for p in pending:
            if p.error:
                raise ValueError(p.error)
        return [self._output(p.seq) for p in pending]

    @torch.inference_mode()
    def logits(self, prompt_token_ids: list[int]) -> torch.Tensor:
        """float32 [len(prompt), vocab]: one full-prompt forward, through the KV cache."""
        seq = Sequence("logits", list(prompt_token_ids), 1, SamplingParams())
        with self._step_lock:
            if not self.kv.can_admit(seq, len(prompt_token_ids)):
                raise ValueError("the prompt does not fit in the free KV cache")
            self.kv.admit(seq, reuse_prefix=False)  # a full forward into blocks of its own
            try:
                if not self.kv.grow(seq, len(prompt_token_ids)):
                    raise ValueError("the prompt does not fit in the free KV cache")
                logits, _ = self.runner.run([ScheduledSeq(seq, len(prompt_token_ids), True)], all_logits=True)
            finally:
                self.kv.free(seq)
        return logits

    def _on_generate_event(self, p: _Pending, event: TokenEvent) -> None:
        if event.error:
            p.error = event.error
        if event.finished:
            p.done.set()

    def _output(self, seq: Sequence) -> GenerationOutput:
        return GenerationOutput(
            request_id=seq.request_id,
            prompt_token_ids=seq.prompt_token_ids,
            token_ids=list(seq.output_token_ids),
            finish_reason=seq.finish_reason,
            text=self.tokenizer.decode(seq.output_token_ids),
            num_preemptions=seq.num_preemptions,
            num_cached_prompt_tokens=seq.num_cached_prompt_tokens,
        )
