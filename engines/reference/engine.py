"""The reference engine: a step loop over a scheduler, a KV cache and the model.

Requests can be submitted from any thread while the loop runs on its own
thread (`start()`); each streams its tokens as they are sampled. Without a
started thread, `generate()` drives the same loop in the caller's thread.
"""

from __future__ import annotations

import itertools
import threading
import time
import zlib
from collections.abc import AsyncIterator
from typing import Any

import torch
import torch.distributed as dist

from engines.base import (
    EventChannel,
    Request,
    StepStat,
    TokenEvent,
    request_error,
    resolve_max_model_len,
)
from engines.reference.build import build_rank_model, default_num_kv_blocks
from engines.reference.kv_cache import blocks_for, build_kv_cache
from engines.reference.model_runner import ModelRunner
from engines.reference.offline import OfflineAPI
from engines.reference.sampling import sample
from engines.reference.scheduler import SchedulerOptions, build_scheduler
from engines.reference.sequence import SeqStatus, Sequence
from engines.reference.tokenizer import load_tokenizer
from engines.reference.tp_group import (
    broadcast_step,
    free_port,
    init_group,
    rank_device,
    spawn_workers,
    threads_per_rank,
)
from engines.reference.weights import resolve_model


class ReferenceEngine(OfflineAPI):
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
        inject_slowdown: float = 0.0,
    ):
        if kv_block_size < 1:
            raise ValueError(f"kv_block_size must be >= 1, got {kv_block_size}")
        if tp < 1:
            raise ValueError(f"tp must be >= 1, got {tp}")
        if not inject_slowdown >= 0:
            raise ValueError(f"inject_slowdown must be >= 0, got {inject_slowdown}")
        # Test-only: stretches every step by this fraction of its own time (see _stretch).
        self.inject_slowdown = float(inject_slowdown)
        self.device = rank_device(device, 0)
        self.seed = seed
        self.tp = tp
        self.model_name = model
        self.config, _ = resolve_model(model)
        self.max_model_len = resolve_max_model_len(self.config.max_position_embeddings, max_model_len)
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
            inject_slowdown=self.inject_slowdown,
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
            num_kv_blocks = default_num_kv_blocks(built, self.max_model_len, kv_block_size, max_num_seqs, self.device)
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
            self.weight_bytes = sum(self.rank_weight_bytes)  # a step reads every rank's slice
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
            self._inbox.clear()  # what waits here is in _live too, and is retired below
            self._aborts.clear()
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
        channel = EventChannel()
        seq = self._make_sequence(request, channel.deliver)
        self._submit(seq)
        try:
            async for event in channel.events():
                yield event
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
        # The step lock covers every change to the KV cache, so logits() can run beside the loop.
        with self._step_lock:
            return self._step_locked(inbox, aborts, flushed_order)

    def _step_locked(self, inbox: list[Sequence], aborts: set[str], flushed_order: int) -> bool:
        now = time.perf_counter()
        for seq in inbox:
            self.scheduler.add(seq)
        for request_id in aborts:
            seq = self._live.get(request_id)
            if seq is not None:
                self._retire(seq, "abort", now)
        if not self.scheduler.has_work():
            return False
        start = time.perf_counter()
        cpu_start_s = time.process_time()
        hits_before = self.kv.stats()["prefix_cache_hit_tokens"]
        out = self.scheduler.schedule(start, flushed_order)
        if out is None:
            return False
        prefix_hits = self.kv.stats()["prefix_cache_hit_tokens"] - hits_before
        logits, sampled = self.runner.run(out.scheduled)
        real = [out.scheduled[i] for i in sampled]
        tokens = sample(logits, [s.seq.sampling for s in real], [s.seq.generator for s in real])
        now = self._stretch(start, time.perf_counter())
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
        self._record_step(out, start, now, prefix_hits, time.process_time() - cpu_start_s)
        return True

    def _stretch(self, start: float, end: float) -> float:
        """With inject_slowdown = f, spin for f x the step's own time; the new end of the step.

        A calibrated slowdown for testing the regression gate: it lands inside the step (its
        duration, its tokens' times), as a slower kernel would. A busy-wait, not a sleep, so
        the core stays as busy as it would be computing.
        """
        if not self.inject_slowdown:
            return end
        until = end + self.inject_slowdown * (end - start)
        while (now := time.perf_counter()) < until:
            pass
        return now

    def _record_step(self, out, start: float, end: float, prefix_hits: int, cpu_s: float) -> None:
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
                prefix_cache_hit_tokens=prefix_hits,  # this step's admissions (re-admissions count anew)
                cpu_s=cpu_s,
            )
        )

    # -- requests -------------------------------------------------------------------------

    def _make_sequence(self, request: Request, on_event) -> Sequence:
        seq = Sequence(
            request_id=request.id,
            prompt_token_ids=request.prompt_ids(self.tokenizer),
            max_tokens=request.max_tokens,
            sampling=request.sampling,
            eos_token_ids=self.config.eos_token_ids,
        )
        seq.on_tokens = on_event
        seed = request.sampling.seed
        if seed is None:  # derived from the engine's seed and the request's id: the same in every process
            seed = (self.seed * 1_000_003 + zlib.crc32(request.id.encode())) % 2**63
        if request.sampling.temperature > 0:
            seq.generator = torch.Generator().manual_seed(seed)
        return seq

    def _submit(self, seq: Sequence) -> None:
        error = self._check_fits(seq)
        if error is None:
            with self._lock:  # a loop that dies sets _died under this lock, then fails what is in _live
                error = self._died
                if error is None:
                    self._live[seq.request_id] = seq
                    self._inbox.append(seq)
                    self._last_order = max(self._last_order, seq.order)
                    self._lock.notify_all()
                    return
        seq.status = SeqStatus.FINISHED
        seq.finish_reason = "error"
        seq.on_tokens(self._event(seq, [], time.perf_counter(), finished=True, error=error))

    def _check_fits(self, seq: Sequence) -> str | None:
        error = request_error(seq.prompt_token_ids, seq.max_tokens, self.config.vocab_size, self.max_model_len)
        if error is not None:
            return error
        total = len(seq.prompt_token_ids) + seq.max_tokens
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

