"""Hugging Face transformers' own `generate` as a peer baseline, on llmperf's presets and checkpoints.

A preset gets exactly the reference engine's seeded random weights (the
reference model is built, then its state dict moved into transformers'
LlamaForCausalLM / Qwen2ForCausalLM), so both engines compute the same function;
a checkpoint folder is loaded with `from_pretrained`. Batching is transformers':
requests waiting when a batch ends are left-padded into one `generate` call of
up to `max_batch_size` (static batching with its own KV cache); a batch runs
until its longest member is done. A streamer stamps every token of every row as
`generate` hands it over. `generate` runs on the engine's thread; events reach
the caller's event loop as the reference engine's do.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from transformers import (
    GenerationConfig,
    StoppingCriteria,
    StoppingCriteriaList,
)
from transformers.generation.streamers import BaseStreamer

from engines.base import (
    EngineCapabilities,
    Request,
    StepStat,
    TokenEvent,
    local_model_info,
    request_error,
    resolve_max_model_len,
)
from engines.hf_model import build_hf_model
from engines.hf_options import HFEngineConfig
from engines.reference.precision import PRECISIONS, Precision
from engines.reference.tokenizer import load_tokenizer
from engines.reference.weights import resolve_model
from engines.threaded import ThreadedEngine
from llmperf.registry import Registry

FLOAT_PRECISIONS: Registry[Precision] = Registry(
    "hf precision",
    {name: PRECISIONS[name] for name in PRECISIONS if not PRECISIONS[name].is_quantized},
)


@dataclass
class _Job:
    request: Request
    prompt_token_ids: list[int]
    deliver: Callable[[TokenEvent], None]
    output_token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    aborted: bool = False
    admitted_s: float | None = None  # when its generate() call began

    @property
    def request_id(self) -> str:
        return self.request.id

    @property
    def is_finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def batch_key(self) -> tuple:
        """Requests share a generate() call only when they sample alike."""
        s = self.request.sampling
        return (s.temperature, s.top_k, s.top_p, s.ignore_eos, s.stop_token_ids)


class HFEngine(ThreadedEngine):
    name = "hf"
    loop_name = "generate"
    capabilities = EngineCapabilities(step_stats=True, liveness=True)

    def __init__(self, model: str = "tiny", options: HFEngineConfig | None = None, **overrides: Any):
        """`options` (default: the defaults), with `overrides` replacing some of its fields."""
        opts = replace(options or HFEngineConfig(), **overrides)
        precision = FLOAT_PRECISIONS.get(opts.precision)
        self.opts = opts
        self.device = torch.device(opts.device)
        self.seed = opts.seed
        self.model_name = model
        self.config, checkpoint = resolve_model(model)
        self.max_model_len = resolve_max_model_len(
            self.config.max_position_embeddings, opts.max_model_len
        )
        # info() reports the options as resolved
        self.options = {**asdict(opts), "max_model_len": self.max_model_len}
        del self.options["name"]
        self.model = build_hf_model(
            self.config,
            checkpoint,
            precision.compute_dtype(self.device),
            self.device,
            opts.seed,
            self.max_model_len,
            opts.attn_implementation,
        )
        unique = {p.data_ptr(): p for p in self.model.parameters()}  # tied embeddings count once
        self.weight_bytes = sum(p.numel() * p.element_size() for p in unique.values())
        self.tokenizer = load_tokenizer(
            checkpoint, self.config.vocab_size, self.config.eos_token_ids
        )
        self.pad_token_id = self.config.eos_token_ids[0] if self.config.eos_token_ids else 0

        super().__init__()
        self._num_batches = 0

    # -- Engine protocol (start, stop, stream, abort, is_alive: engines/threaded.py) ----

    def info(self) -> dict[str, Any]:
        import transformers

        return {
            **local_model_info(self, str(self.model.dtype), self.model.dtype.itemsize),
            "transformers_version": transformers.__version__,
            **self.options,
        }

    # -- requests ----------------------------------------------------------------------

    def _make_job(self, request: Request, deliver: Callable[[TokenEvent], None]) -> _Job:
        return _Job(request, request.prompt_ids(self.tokenizer), deliver)

    def _job_error(self, job: _Job) -> str | None:
        return request_error(
            job.prompt_token_ids, job.request.max_tokens, self.config.vocab_size, self.max_model_len
        )

    def _abort_locked(self, request_id: str) -> _Job | None:
        job = self._live.get(request_id)
        if job is not None:
            job.aborted = True  # a running batch drops it at its next step
        return super()._abort_locked(request_id)

    def _stop_locked(self) -> None:
        for job in self._live.values():
            job.aborted = True

    def _end(self, job: _Job, reason: str, error: str | None = None) -> None:
        self._finish(job, reason, time.perf_counter(), error=error)

    def _reject(self, job: _Job, error: str) -> None:
        self._end(job, "error", error)

    def _finish(
        self, job: _Job, reason: str, now: float, token: int | None = None, error: str | None = None
    ) -> None:
        job.finish_reason = reason
        with self._lock:
            self._live.pop(job.request.id, None)
        job.deliver(self._token_event(job, token, now, finished=True, error=error))

    def _token_event(
        self, job: _Job, token: int | None, now: float, finished: bool = False, error: str | None = None
    ) -> TokenEvent:
        first = token is not None and len(job.output_token_ids) == 1
        return self._event(job, [] if token is None else [token], now, finished, error, first)

    # -- the generate loop ---------------------------------------------------------------

    def _work(self) -> bool:
        with self._lock:
            if not self._inbox:
                return False
            batch = self._take_batch()
        self._run_batch(batch)
        return True

    def _take_batch(self) -> list[_Job]:
        key = self._inbox[0].batch_key
        batch = [j for j in self._inbox if j.batch_key == key][: self.opts.max_batch_size]
        for job in batch:
            self._inbox.remove(job)
        return batch

    @torch.inference_mode()
    def _run_batch(self, batch: list[_Job]) -> None:
        start = time.perf_counter()
        for job in batch:
            job.admitted_s = start
        prompt_len = max(len(j.prompt_token_ids) for j in batch)
        pad = self.pad_token_id
        input_ids = torch.tensor(
            [[pad] * (prompt_len - len(j.prompt_token_ids)) + j.prompt_token_ids for j in batch]
        )
        attention_mask = torch.tensor(
            [
                [0] * (prompt_len - len(j.prompt_token_ids)) + [1] * len(j.prompt_token_ids)
                for j in batch
            ]
        )
        sampling = batch[0].request.sampling
        do_sample = sampling.temperature > 0
        generation_config = GenerationConfig(
            max_new_tokens=max(j.request.max_tokens for j in batch),
            do_sample=do_sample,
            temperature=sampling.temperature if do_sample else None,
            top_k=sampling.top_k if do_sample else None,  # 0: no top-k filter
            top_p=sampling.top_p if do_sample else None,
            pad_token_id=pad,
            eos_token_id=None if sampling.ignore_eos else list(self.config.eos_token_ids),
        )
        seed = sampling.seed
        if seed is None:
            seed = self.seed * 1_000_003 + self._num_batches
        self._num_batches += 1
        streamer = TimedStreamer(self, batch, prompt_len, start)
        try:
            if do_sample:  # generate draws from torch's global generator; one seed per batch
                torch.manual_seed(seed)
            self.model.generate(
                input_ids=input_ids.to(self.device),
                attention_mask=attention_mask.to(self.device),
                generation_config=generation_config,
                streamer=streamer,
                stopping_criteria=StoppingCriteriaList([BatchStop(batch, prompt_len)]),
            )
        except Exception as err:  # a failed batch fails its requests, not the engine
            for job in batch:
                if job.finish_reason is None:
                    self._finish(
                        job, "error", time.perf_counter(), error=f"{type(err).__name__}: {err}"
                    )
        for job in batch:  # generate stopped before a row did (an abort ended the batch)
            if job.finish_reason is None:
                self._finish(job, "abort", time.perf_counter())

    def _on_tokens(self, batch: list[_Job], tokens: list[int], now: float) -> None:
        """One step's tokens, one per row; rows already finished are padding."""
        for job, token in zip(batch, tokens, strict=True):
            if job.finish_reason is not None:
                continue
            if job.aborted:
                self._finish(job, "abort", now)
                continue
            job.output_token_ids.append(token)
            s = job.request.sampling
            if (
                token in self.config.eos_token_ids and not s.ignore_eos
            ) or token in s.stop_token_ids:
                self._finish(job, "stop", now, token)
            elif len(job.output_token_ids) >= job.request.max_tokens:
                self._finish(job, "length", now, token)
            else:
                job.deliver(self._token_event(job, token, now))


class TimedStreamer(BaseStreamer):
    """Stamps each step's tokens as generate() hands them over; records the step."""

    def __init__(self, engine: HFEngine, batch: list[_Job], prompt_len: int, start_s: float):
        self.engine = engine
        self.batch = batch
        self.prompt_len = prompt_len
        self.last_s = start_s
        self.num_steps = 0

    def put(self, value: torch.Tensor) -> None:
        if value.dim() == 2:  # generate() first hands over the (padded) prompts
            return
        now = time.perf_counter()
        batch = self.batch
        active = [j for j in batch if j.finish_reason is None and not j.aborted]
        prefill = self.num_steps == 0
        real_prompt = sum(len(j.prompt_token_ids) for j in batch)
        self.engine._steps.append(
            StepStat(
                start_s=self.last_s,
                duration_s=now - self.last_s,
                kind="prefill" if prefill else "decode",
                num_seqs=len(active),
                num_prefill_tokens=real_prompt if prefill else 0,
                num_decode_tokens=0 if prefill else len(active),
                padded_tokens=len(batch) * self.prompt_len - real_prompt
                if prefill
                else len(batch) - len(active),
                # KV positions held for real tokens: a row's left padding and a finished
                # row's slot are computed (padded_tokens) but hold nothing of a request
                context_tokens=sum(len(j.prompt_token_ids) + self.num_steps for j in active),
                num_waiting=len(self.engine._inbox),
            )
        )
        self.num_steps += 1
        self.last_s = now
        self.engine._on_tokens(batch, value.tolist(), now)

    def end(self) -> None:
        """Nothing held back: put() delivered every token."""


class BatchStop(StoppingCriteria):
    """Per row: done at its own max_tokens, at a stop token, or when aborted (EOS is generate's)."""

    def __init__(self, batch: list[_Job], prompt_len: int):
        self.batch = batch
        self.prompt_len = prompt_len

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        num_generated = input_ids.shape[1] - self.prompt_len
        last = input_ids[:, -1].tolist()
        done = [
            job.aborted
            or job.finish_reason is not None
            or num_generated >= job.request.max_tokens
            or token in job.request.sampling.stop_token_ids
            for job, token in zip(self.batch, last, strict=True)
        ]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)
