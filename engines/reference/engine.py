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
from dataclasses import asdict, replace
from typing import Any

import torch
import torch.distributed as dist

from engines.base import (
    EngineCapabilities,
    Request,
    StepStat,
    local_model_info,
    request_error,
    resolve_max_model_len,
)
from engines.reference.build import build_rank_model, default_num_kv_blocks
from engines.reference.cpu_layout import WidenedLinear, resolve_bf16_matmul
from engines.reference.cpu_malloc import apply_cpu_malloc
from engines.reference.fast_path import resolve_fast_path
from engines.reference.huge_pages import huge_page_report, resolve_huge_pages
from engines.reference.kernels.cpu_ops import build_seconds as cpu_ops_build_seconds
from engines.reference.kv_cache import KV_CACHES, blocks_for
from engines.reference.model_runner import ModelRunner
from engines.reference.offline import OfflineAPI
from engines.reference.options import ReferenceEngineConfig
from engines.reference.sampling import sample
from engines.reference.scheduler import SCHEDULERS
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
from engines.threaded import ThreadedEngine


class ReferenceEngine(ThreadedEngine, OfflineAPI):
    name = "reference"
    capabilities = EngineCapabilities(
        flush=True, step_stats=True, kv_stats=True, scheduler=True, liveness=True
    )

    def __init__(self, model: str = "tiny", options: ReferenceEngineConfig | None = None, **overrides: Any):
        """`options` (default: the defaults), with `overrides` replacing some of its fields."""
        opts = replace(options or ReferenceEngineConfig(), **overrides)
        self.opts = opts
        # Test-only: stretches every step by this fraction of its own time (see _stretch).
        self.inject_slowdown = float(opts.inject_slowdown)
        self.device = rank_device(opts.device, 0)
        self.seed = opts.seed
        self.tp = opts.tp
        self.model_name = model
        self.config, _ = resolve_model(model)
        self.max_model_len = resolve_max_model_len(self.config.max_position_embeddings, opts.max_model_len)
        # What the other ranks build from, and what info() reports: the options as resolved.
        self.options = {**asdict(opts), "model": model, "max_model_len": self.max_model_len,
                        "cpu_bf16_matmul": resolve_bf16_matmul(opts.cpu_bf16_matmul, opts.compile)
                        if self.device.type == "cpu" else opts.cpu_bf16_matmul,
                        "cpu_malloc": apply_cpu_malloc(opts.cpu_malloc) if self.device.type == "cpu" else "default",
                        "cpu_huge_pages": resolve_huge_pages(opts.cpu_huge_pages, self.device.type)}
        del self.options["name"]
        # attention=auto, fused_ops=auto: the path chosen for this device, reported by info().
        self.options.update(resolve_fast_path(opts.attention, opts.fused_ops, self.device.type,
                                              self.config.head_dim, opts.compile))
        if opts.tp > 1 and self.device.type == "cpu":
            torch.set_num_threads(threads_per_rank(opts.tp))

        built = build_rank_model(self.options, 0, opts.tp, self.device)
        self.model, self.backend, self.precision = built.model, built.backend, built.precision
        self.config = built.config
        self.local_config = built.local_config
        self.weight_bytes = built.weight_bytes
        self.tokenizer = load_tokenizer(built.checkpoint, self.config.vocab_size, self.config.eos_token_ids)
        num_kv_blocks = opts.num_kv_blocks
        if num_kv_blocks is None:
            num_kv_blocks = default_num_kv_blocks(
                built, self.max_model_len, opts.kv_block_size, opts.max_num_seqs, self.device
            )
        self.options["num_kv_blocks"] = num_kv_blocks
        self.kv = KV_CACHES.build(
            opts.kv_cache,
            self.local_config,
            num_blocks=num_kv_blocks,
            max_num_seqs=opts.max_num_seqs,
            max_model_len=self.max_model_len,
            block_size=opts.kv_block_size,
            dtype=built.compute_dtype,
            device=self.device,
            enable_prefix_caching=opts.enable_prefix_caching,
            huge_pages=self.options["cpu_huge_pages"] == "true",
        )
        self.scheduler = SCHEDULERS.build(opts.batching, self.kv, opts)
        self._workers: list = []
        self.rank_weight_bytes = [self.weight_bytes]
        broadcast = None
        if opts.tp > 1:
            port = free_port()
            self._workers = spawn_workers(opts.tp, port, self.options)
            init_group(0, opts.tp, port, self.device)
            self.rank_weight_bytes = [None] * opts.tp
            dist.all_gather_object(self.rank_weight_bytes, self.weight_bytes)
            self.weight_bytes = sum(self.rank_weight_bytes)  # a step reads every rank's slice
            broadcast = broadcast_step
        kv_layers = [self.kv.layer(i) for i in range(self.config.num_hidden_layers)]
        self.runner = ModelRunner(self.model, kv_layers, opts.kv_block_size, self.backend, self.device, broadcast,
                                  slot_blocks=self.kv.blocks_per_slot)

        super().__init__()
        self._aborts: set[str] = set()
        self._last_order = -1  # arrival order of the latest submission
        self._flushed_order = -1  # requests up to this order may launch in a partial batch
        self._step_lock = threading.Lock()  # one forward at a time (loop, logits())
        self._ids = itertools.count()
        self.compile_s = self._warm_up_compiled() if opts.compile else None

    def _warm_up_compiled(self) -> float:
        """Seconds spent compiling (engine.compile): a prefill and decode steps run through the
        compiled model before any request, then forgotten, so no measured step pays for it."""
        start = time.perf_counter()
        self.generate([[self.config.bos_token_id or 1] * 8] * 2, max_tokens=3, ignore_eos=True)
        self._steps.clear()
        return time.perf_counter() - start

    # -- Engine protocol (start, stop, stream, abort, is_alive: engines/threaded.py) ----

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

    def info(self) -> dict[str, Any]:
        compute_dtype = str(self.precision.compute_dtype(self.device))
        # The Linears' arithmetic, for FLOP ceilings: bf16 weights widened to fp32 multiply in fp32.
        widened = any(isinstance(m, WidenedLinear) for m in self.model.modules())
        return {
            **local_model_info(self, compute_dtype, self.kv.storage.element_size()),
            "matmul_dtype": "float32" if widened else compute_dtype.removeprefix("torch."),
            "rank_weight_bytes": self.rank_weight_bytes,
            "compile_s": self.compile_s,
            # attention=cpu, fused_ops: seconds building (first use on this CPU) or loading the C++ ops.
            "cpu_ops_build_s": cpu_ops_build_seconds(),
            # cpu_huge_pages: what lies in huge pages, read back from /proc/self/smaps.
            "huge_page_bytes": huge_page_report(self.model, self.kv.storage) if self.device.type == "cpu" else None,
            **self.options,
        }

    # -- the step loop ------------------------------------------------------------------

    def _work(self) -> bool:
        return self._step_once()

    def _abort_locked(self, request_id: str) -> None:
        self._aborts.add(request_id)  # the loop retires it at its next step

    def _has_news_locked(self) -> bool:
        return bool(self._inbox or self._aborts)

    def _idle_timeout_s(self) -> float | None:
        wake = self.scheduler.next_wakeup_s(time.perf_counter())
        return None if wake is None else max(0.0, wake - time.perf_counter())

    def _stop_locked(self) -> None:
        self._aborts.clear()

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
                request_ids=[s.seq.request_id for s in real],
            )
        )

    # -- requests -------------------------------------------------------------------------

    def _make_job(self, request: Request, on_event) -> Sequence:
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

    def _submitted_locked(self, seq: Sequence) -> None:
        self._last_order = max(self._last_order, seq.order)

    def _reject(self, seq: Sequence, error: str) -> None:
        seq.status = SeqStatus.FINISHED
        seq.finish_reason = "error"
        seq.on_tokens(self._event(seq, [], time.perf_counter(), finished=True, error=error))

    def _end(self, seq: Sequence, reason: str, error: str | None = None) -> None:
        self._retire(seq, reason, time.perf_counter(), error=error)

    def _job_error(self, seq: Sequence) -> str | None:
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

    def _retire(self, seq: Sequence, reason: str, now: float, emit: bool = True, error: str | None = None) -> None:
        seq.status = SeqStatus.FINISHED
        seq.finish_reason = seq.finish_reason or reason
        self.scheduler.finish(seq)
        self._live.pop(seq.request_id, None)
        if emit:
            seq.on_tokens(self._event(seq, [], now, finished=True, error=error))

