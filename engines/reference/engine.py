"""The reference engine: a step loop over a scheduler, a KV cache and the model.

Requests can be submitted from any thread while the loop runs on its own
thread (`start()`); each streams its tokens as they are sampled. Without a
started thread, `generate()` drives the same loop in the caller's thread.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from engines.base import Request, SamplingParams, StepStat, TokenEvent
from engines.reference.attention import AttentionBackend, get_backend
from engines.reference.config import ModelConfig
from engines.reference.cpu_layout import optimize_cpu_layout
from engines.reference.kv_cache import blocks_for, build_kv_cache
from engines.reference.model import LlamaForCausalLM
from engines.reference.model_runner import ModelRunner
from engines.reference.precision import Precision, get_precision, quantize_model, weight_bytes
from engines.reference.sampling import sample
from engines.reference.scheduler import SchedulerOptions, build_scheduler
from engines.reference.sequence import SeqStatus, Sequence
from engines.reference.tokenizer import load_tokenizer
from engines.reference.tp import (
    broadcast_step,
    free_port,
    init_group,
    local_config,
    rank_device,
    shard_model,
    spawn_workers,
    threads_per_rank,
)
from engines.reference.weights import build_meta_model, materialize, resolve_model

DEFAULT_MAX_MODEL_LEN = 4096
CPU_KV_MEMORY_FRACTION = 0.25  # of available RAM, when num_kv_blocks is not given
GPU_MEMORY_UTILIZATION = 0.90  # weights + KV cache, of the GPU's total memory


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
class RankModel:
    """One rank's model: its slice of the weights, in its precision."""

    model: LlamaForCausalLM
    config: ModelConfig
    local_config: ModelConfig
    backend: AttentionBackend
    precision: Precision
    compute_dtype: torch.dtype
    weight_bytes: int
    checkpoint: Path | None


def build_rank_model(options: dict[str, Any], rank: int, world: int, device: torch.device) -> RankModel:
    backend = get_backend(options["attention"])
    precision = get_precision(options["precision"])
    config, checkpoint = resolve_model(options["model"])
    dtype = precision.compute_dtype(device)
    model = materialize(build_meta_model(config, options["max_model_len"]), checkpoint, dtype, device, options["seed"])
    if world > 1:
        shard_model(model, rank, world)
    quantize_model(model, options["precision"])
    if device.type == "cpu":
        optimize_cpu_layout(model)
    return RankModel(
        model=model,
        config=config,
        local_config=local_config(config, world),
        backend=backend,
        precision=precision,
        compute_dtype=dtype,
        weight_bytes=weight_bytes(model),
        checkpoint=checkpoint,
    )


@dataclass
class _Pending:
    """A generate() request awaited by the caller's thread."""

    seq: Sequence
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None


class ReferenceEngine:
    name = "reference"

    def __init__(
        self,
        model: str = "tiny",
        attention: str = "sdpa",
        precision: str = "fp32",
        device: str = "cpu",
        seed: int = 0,
        batching: str = "continuous",
        kv_cache: str = "paged",
        max_batch_size: int = 8,
        max_wait_ms: float = 20.0,
        max_num_seqs: int = 32,
        max_num_batched_tokens: int = 512,
        num_kv_blocks: int | None = None,
        kv_block_size: int = 16,
        enable_prefix_caching: bool = False,
        max_model_len: int | None = None,
        tp: int = 1,
    ):
        if kv_block_size < 1:
            raise ValueError(f"kv_block_size must be >= 1, got {kv_block_size}")
        if tp < 1:
            raise ValueError(f"tp must be >= 1, got {tp}")
        self.device = rank_device(device, 0)
        self.seed = seed
        self.tp = tp
        self.model_name = model
        self.config, _ = resolve_model(model)
        limit = self.config.max_position_embeddings
        self.max_model_len = min(max_model_len or min(limit, DEFAULT_MAX_MODEL_LEN), limit)
        self.options = dict(
            model=model,
            attention=attention,
            precision=precision,
            device=device,
            seed=seed,
            batching=batching,
            kv_cache=kv_cache,
            max_batch_size=max_batch_size,
            max_wait_ms=max_wait_ms,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            num_kv_blocks=num_kv_blocks,
            kv_block_size=kv_block_size,
            enable_prefix_caching=enable_prefix_caching,
            max_model_len=self.max_model_len,
            tp=tp,
        )
        sched_opts = SchedulerOptions(max_batch_size, max_wait_ms, max_num_seqs, max_num_batched_tokens)
        if tp > 1 and self.device.type == "cpu":
            torch.set_num_threads(threads_per_rank(tp))

        built = build_rank_model(self.options, 0, tp, self.device)
        self.model, self.backend, self.precision = built.model, built.backend, built.precision
        self.config = built.config
        self.local_config = built.local_config
        self.weight_bytes = built.weight_bytes
        self.tokenizer = load_tokenizer(built.checkpoint, self.config.vocab_size, self.config.eos_token_ids)
        if num_kv_blocks is None:
            num_kv_blocks = self._default_num_kv_blocks(kv_block_size, max_num_seqs, built.compute_dtype)
        self.options["num_kv_blocks"] = num_kv_blocks
        self.kv = build_kv_cache(
            kv_cache,
            self.local_config,
            num_blocks=num_kv_blocks,
            max_num_seqs=max_num_seqs,
            max_model_len=self.max_model_len,
            block_size=kv_block_size,
            dtype=built.compute_dtype,
            device=self.device,
            enable_prefix_caching=enable_prefix_caching,
        )
        self.scheduler = build_scheduler(batching, self.kv, sched_opts)
        self._workers: list = []
        self.rank_weight_bytes = [self.weight_bytes]
        broadcast = None
        if tp > 1:
            port = free_port()
            self._workers = spawn_workers(tp, port, self.options)
            init_group(0, tp, port, self.device)
            self.rank_weight_bytes = [None] * tp
            dist.all_gather_object(self.rank_weight_bytes, self.weight_bytes)
            broadcast = broadcast_step
        kv_layers = [self.kv.layer(i) for i in range(self.config.num_hidden_layers)]
        self.runner = ModelRunner(self.model, kv_layers, kv_block_size, self.backend, self.device, broadcast)

        self._lock = threading.Condition()  # guards the inbox, aborts and the flags below
        self._inbox: list[Sequence] = []
        self._aborts: set[str] = set()
        self._last_order = -1  # arrival order of the latest submission
        self._flushed_order = -1  # requests up to this order may launch in a partial batch
        self._running = False
        self._died: str | None = None  # why the step loop died, if it did
        self._thread: threading.Thread | None = None
        self._step_lock = threading.Lock()  # one forward at a time (loop, logits())
        self._ids = itertools.count()
        self._steps: list[StepStat] = []
        self._live: dict[str, Sequence] = {}

    # -- Engine protocol ---------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._running:
                return
            self._running = True
        self._thread = threading.Thread(target=self._loop, name="reference-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._running = False
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        for seq in list(self._live.values()):
            self._retire(seq, "abort", time.perf_counter())

    def is_alive(self) -> bool:
        """False once the step loop has died (a server then answers 503 instead of hanging)."""
        return self._died is None

    def close(self) -> None:
        """Stop the loop and, with tp > 1, the other ranks."""
        self.stop()
        if self._workers:
            broadcast_step(None)
            for p in self._workers:
                p.join(timeout=30)
            dist.destroy_process_group()
            self._workers = []

    def __enter__(self) -> ReferenceEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def flush(self) -> None:
        """No more requests are coming for now: what waits launches, even a partial static batch."""
        with self._lock:
            self._flushed_order = self._last_order
            self._lock.notify_all()

    async def stream(self, request: Request) -> AsyncIterator[TokenEvent]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[TokenEvent] = asyncio.Queue()
        def deliver(event: TokenEvent) -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(queue.put_nowait, event)

        seq = self._make_sequence(request, deliver)
        self._submit(seq)
        try:
            while True:
                event = await queue.get()
                yield event
                if event.finished:
                    return
        finally:
            if not seq.is_finished:
                self.abort(seq.request_id)

    def abort(self, request_id: str) -> None:
        with self._lock:
            self._aborts.add(request_id)
            self._lock.notify_all()

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.model_name,
            "model_config": self.config.to_dict(),
            "params": self.config.num_params(),
            "weight_bytes": self.weight_bytes,
            "kv_bytes_per_token": self.config.kv_bytes_per_token(self.kv.storage.element_size()),
            "rank_weight_bytes": self.rank_weight_bytes,
            "compute_dtype": str(self.precision.compute_dtype(self.device)).removeprefix("torch."),
            **self.options,
        }

    def step_stats(self) -> list[StepStat]:
        return list(self._steps)

    # -- offline API ---------------------------------------------------------------------

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
            p.seq = self._make_sequence(request, lambda ev, p=p: self._on_generate_event(p, ev))
            pending.append(p)
        if self._thread is not None:
            for p in pending:
                self._submit(p.seq)
            self.flush()
            for p in pending:
                p.done.wait()
        else:
            for p in pending:
                self._submit(p.seq)
            self.flush()
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
        from engines.reference.scheduler import ScheduledSeq

        seq = Sequence("logits", list(prompt_token_ids), 1, SamplingParams())
        with self._step_lock:
            if not self.kv.can_admit(seq, len(prompt_token_ids)):
                raise ValueError("the prompt does not fit in the free KV cache")
            self.kv.admit(seq)
            seq.num_computed_tokens = 0  # a full forward even when a prefix is cached
            try:
                if not self.kv.grow(seq, len(prompt_token_ids)):
                    raise ValueError("the prompt does not fit in the free KV cache")
                logits, _ = self.runner.run([ScheduledSeq(seq, len(prompt_token_ids), True)], all_logits=True)
            finally:
                self.kv.free(seq)
        return logits

    # -- the step loop --------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            self._run_loop()
        except BaseException as err:  # fail what is in flight instead of leaving it hanging
            message = f"the engine's step loop died: {type(err).__name__}: {err}"
            with self._lock:
                self._running = False
                self._died = message
            for seq in list(self._live.values()):
                self._retire(seq, "error", time.perf_counter(), error=message)
            raise

    def _run_loop(self) -> None:
        while True:
            with self._lock:
                if not self._running:
                    return
            if not self._step_once():
                with self._lock:
                    if not self._running:
                        return
                    if not self._inbox and not self._aborts:
                        wake = self.scheduler.next_wakeup_s(time.perf_counter())
                        timeout = None if wake is None else max(0.0, wake - time.perf_counter())
                        self._lock.wait(timeout)

    def _step_once(self) -> bool:
        """Admit submissions, run one step if there is one. False when there was nothing to run."""
        with self._lock:
            inbox, self._inbox = self._inbox, []
            aborts, self._aborts = self._aborts, set()
            flushed_order = self._flushed_order
        now = time.perf_counter()
        for seq in inbox:
            self.scheduler.add(seq)
        for request_id in aborts:
            seq = self._live.get(request_id)
            if seq is not None:
                self._retire(seq, "abort", now)
        if not self.scheduler.has_work():
            return False
        with self._step_lock:
            start = time.perf_counter()
            out = self.scheduler.schedule(start, flushed_order)
            if out is None:
                return False
            logits, sampled = self.runner.run(out.scheduled)
            real = [out.scheduled[i] for i in sampled]
            tokens = sample(logits, [s.seq.sampling for s in real], [s.seq.generator for s in real])
            now = time.perf_counter()
        for s in out.scheduled:
            if not s.is_padding:
                s.seq.num_computed_tokens += s.num_new_tokens
                self.kv.commit(s.seq)
        for s in out.admitted:
            if s.admitted_s is None:
                s.admitted_s = start
        for s, token in zip(real, tokens, strict=True):
            seq = s.seq
            seq.append_token(token)
            first = len(seq.output_token_ids) == 1
            self._emit(seq, [token], now, first)
            if seq.finish_reason is not None:
                self._retire(seq, seq.finish_reason, now, emit=False)
        self._record_step(out, start, now)
        return True

    def _record_step(self, out, start: float, end: float) -> None:
        real = [s for s in out.scheduled if not s.is_padding]
        self._steps.append(
            StepStat(
                start_s=start,
                duration_s=end - start,
                kind=out.kind,
                num_seqs=len(real),
                num_prefill_tokens=sum(s.num_new_tokens for s in real if s.is_prefill),
                num_decode_tokens=sum(s.num_new_tokens for s in real if not s.is_prefill),
                padded_tokens=sum(s.num_new_tokens for s in out.scheduled if s.is_padding),
                context_tokens=sum(s.seq.num_computed_tokens for s in real),
                kv_blocks_used=self.kv.num_blocks - self.kv.num_free_blocks,
                kv_blocks_free=self.kv.num_free_blocks,
                num_waiting=len(self.scheduler.waiting),
                preemptions=len(out.preempted),
                prefix_cache_hit_tokens=sum(s.num_cached_prompt_tokens for s in out.admitted),
            )
        )

    # -- requests -------------------------------------------------------------------------

    def _make_sequence(self, request: Request, on_event) -> Sequence:
        ids = request.prompt_token_ids
        if ids is None:
            ids = self.tokenizer.encode(request.prompt_text or "")
        seq = Sequence(
            request_id=request.id,
            prompt_token_ids=list(ids),
            max_tokens=request.max_tokens,
            sampling=request.sampling,
            eos_token_ids=self.config.eos_token_ids,
        )
        seq.on_tokens = on_event
        seed = request.sampling.seed if request.sampling.seed is not None else self.seed * 1_000_003 + seq.order
        if request.sampling.temperature > 0:
            seq.generator = torch.Generator().manual_seed(seed)
        return seq

    def _submit(self, seq: Sequence) -> None:
        error = self._died or self._check_fits(seq)
        if error is not None:
            seq.status = SeqStatus.FINISHED
            seq.finish_reason = "error"
            seq.on_tokens(self._event(seq, [], time.perf_counter(), finished=True, error=error))
            return
        with self._lock:
            self._live[seq.request_id] = seq
            self._inbox.append(seq)
            self._last_order = max(self._last_order, seq.order)
            self._lock.notify_all()

    def _check_fits(self, seq: Sequence) -> str | None:
        if not seq.prompt_token_ids:
            return "the prompt is empty"
        bad = [t for t in seq.prompt_token_ids if not 0 <= t < self.config.vocab_size]
        if bad:
            return f"token id {bad[0]} is outside the vocabulary (size {self.config.vocab_size})"
        total = len(seq.prompt_token_ids) + seq.max_tokens
        if total > self.max_model_len:
            return (
                f"prompt ({len(seq.prompt_token_ids)} tokens) + max_tokens ({seq.max_tokens}) "
                f"exceeds max_model_len ({self.max_model_len})"
            )
        if blocks_for(total, self.kv.block_size) > self.kv.num_blocks:
            return f"the request needs {total} KV positions; the cache holds {self.kv.num_blocks * self.kv.block_size}"
        return None

    def _emit(self, seq: Sequence, tokens: list[int], now: float, first: bool) -> None:
        event = self._event(seq, tokens, now, finished=seq.finish_reason is not None, first=first)
        seq.on_tokens(event)

    def _event(self, seq, tokens, now, finished, error=None, first=False) -> TokenEvent:
        return TokenEvent(
            request_id=seq.request_id,
            token_ids=tuple(tokens),
            time_s=now,
            finished=finished,
            finish_reason=seq.finish_reason if finished else None,
            error=error,
            num_prompt_tokens=len(seq.prompt_token_ids) if finished else None,
            num_output_tokens=len(seq.output_token_ids) if finished else None,
            scheduled_s=seq.admitted_s if first else None,
        )

    def _retire(self, seq: Sequence, reason: str, now: float, emit: bool = True, error: str | None = None) -> None:
        seq.status = SeqStatus.FINISHED
        seq.finish_reason = seq.finish_reason or reason
        self.scheduler.finish(seq)
        self._live.pop(seq.request_id, None)
        if emit:
            seq.on_tokens(self._event(seq, [], now, finished=True, error=error))

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

    def _default_num_kv_blocks(self, block_size: int, max_num_seqs: int, dtype: torch.dtype) -> int:
        """Room for max_num_seqs full-length sequences, capped by a memory budget."""
        bytes_per_block = self.local_config.kv_bytes_per_token(torch.finfo(dtype).bits // 8) * block_size
        wanted = max_num_seqs * blocks_for(self.max_model_len, block_size)
        if self.device.type == "cuda":
            total = torch.cuda.get_device_properties(self.device).total_memory
            budget = total * GPU_MEMORY_UTILIZATION - self.weight_bytes - torch.cuda.memory_allocated(self.device)
        else:
            import psutil

            budget = psutil.virtual_memory().available * CPU_KV_MEMORY_FRACTION
        return max(1, min(wanted, int(budget // bytes_per_block)))
