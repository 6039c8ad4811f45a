"""The scenario's requests: arrival times, prompt tokens and output lengths, all seeded.

The same scenario and tokenizer give the same requests, and each part has its own
random stream, so changing the output lengths leaves the arrivals as they were.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from engines.base import Request, SamplingParams, Tokenizer
from llmperf.errors import DataError
from llmperf.workload.arrivals import ARRIVALS
from llmperf.workload.datasets import Conversation, check_dataset, load_conversations
from llmperf.workload.images import request_images
from llmperf.workload.lengths import LengthConfig, clip_length, sample_length
from llmperf.workload.prefixes import SharedPrefixes
from llmperf.workload.scenario import ScenarioConfig
from llmperf.workload.sessions import Session, Turn, think_time_s
from llmperf.workload.trace import TRACE_BLOCK_TOKENS, TraceRow, load_trace


@dataclass
class _Streams:
    """One random generator per part of a request."""

    arrivals: np.random.Generator
    prompt_lengths: np.random.Generator
    output_lengths: np.random.Generator
    prompt_tokens: np.random.Generator
    order: np.random.Generator  # dataset conversations, warmup trace rows
    prefix_groups: np.random.Generator  # which shared prefix each request starts with
    think_times: np.random.Generator

    @classmethod
    def of(cls, seed: int, phase: int, stage: int = 0) -> _Streams:
        """Fresh generators for a phase (0: measured, 1: warmup): the same on every call.
        (A SeedSequence's first children stay the same when more are spawned.) A stage past
        the first (scenario.stages) draws from its own seed sequence."""
        root = np.random.SeedSequence(seed if stage == 0 else (seed, stage))
        phase_seq = root.spawn(2)[phase]
        return cls(*(np.random.default_rng(s) for s in phase_seq.spawn(7)))


def check_inputs(scenario: ScenarioConfig) -> None:
    """Fail now, before any engine starts, if the dataset is missing or the trace is corrupt."""
    if scenario.dataset:
        check_dataset(scenario.dataset, scenario.dataset_format, scenario.dataset_columns)
    if ARRIVALS[scenario.arrival.process].needs_trace:
        load_trace(scenario.arrival.trace_path)


class Workload:
    """Builds a scenario's warmup and measured requests for one tokenizer.

    Reads the dataset and trace files on construction, so a missing or corrupt file
    fails before any load is sent.
    """

    def __init__(self, scenario: ScenarioConfig, tokenizer: Tokenizer) -> None:
        self.scenario = scenario
        self.tokenizer = tokenizer
        self.process = ARRIVALS[scenario.arrival.process]
        self.trace: list[TraceRow] = (
            load_trace(scenario.arrival.trace_path) if self.process.needs_trace else []
        )
        self.conversations: list[Conversation] = (
            load_conversations(scenario.dataset, scenario.dataset_format, scenario.dataset_columns)
            if scenario.dataset
            else []
        )
        eos = set(tokenizer.eos_token_ids)
        self._token_pool = np.array([t for t in range(tokenizer.vocab_size) if t not in eos])
        self._encoded: dict[str, list[int]] = {}
        self._trace_blocks: dict[int, np.ndarray] = {}  # hash id -> its block's tokens
        self.sampling = SamplingParams(
            temperature=scenario.temperature, ignore_eos=scenario.ignore_eos
        )

    @property
    def closed_loop(self) -> bool:
        return self.process.closed_loop

    @property
    def has_sessions(self) -> bool:
        return self.scenario.sessions.turns > 0

    def sessions(self) -> Iterator[Session]:
        """The measured sessions in arrival order, until their turns add up to `num_requests`
        (the last one cut to fit); endless with only `duration_s` set."""
        streams = _Streams.of(self.scenario.seed, phase=0)
        times = self.process.times(self.scenario.arrival, streams.arrivals, self.trace)
        conversations = self._conversation_cycle(streams.order)
        prefixes = self._shared_prefixes()
        budget = self.scenario.num_requests
        for i, arrival_s in enumerate(times):
            if budget is not None and budget <= 0:
                return
            conversation = next(conversations) if self.conversations else None
            turns = self._turns(conversation, streams)[:budget]
            prefix, shared = prefixes.pick(streams.prefix_groups) if prefixes else ([], 0)
            yield Session(f"s{i}", float(arrival_s), turns, prefix, shared)
            if budget is not None:
                budget -= len(turns)

    def _turns(self, conversation: Conversation | None, streams: _Streams) -> list[Turn]:
        config = self.scenario.sessions
        if conversation is None:
            return [
                Turn(
                    self._random_tokens(
                        sample_length(self.scenario.prompt_tokens, streams.prompt_lengths),
                        streams.prompt_tokens,
                    ),
                    sample_length(self.scenario.output_tokens, streams.output_lengths),
                    think_time_s(config, streams.think_times),
                )
                for _ in range(config.turns)
            ]
        out_cfg = self.scenario.output_tokens
        return [
            Turn(
                self._encode(human),
                clip_length(out_cfg, len(self._encode(reply))),
                think_time_s(config, streams.think_times),
            )
            for human, reply in conversation.exchanges[: config.turns]
        ]

    def _shared_prefixes(self) -> SharedPrefixes | None:
        cfg = self.scenario.prefix
        if not cfg.groups:
            return None
        return SharedPrefixes(cfg.groups, cfg.length, self.scenario.seed, self._token_pool)

    def requests(self) -> Iterator[Request]:
        """The measured requests in arrival order; `arrival_s` is from the measured phase's start.

        Ends after `num_requests` (or with the trace); with only `duration_s` set it is
        endless and the load generator stops it.
        """
        streams = _Streams.of(self.scenario.seed, phase=0)
        times = self.process.times(self.scenario.arrival, streams.arrivals, self.trace)
        rows: Iterator[TraceRow | None] = iter(self.trace) if self.trace else itertools.repeat(None)
        requests = self._build(streams, times, rows, prefix="", is_warmup=False)
        return itertools.islice(requests, self.scenario.num_requests)

    def stage_requests(self, index: int) -> Iterator[Request]:
        """Stage `index`'s requests (scenario.stages), `arrival_s` from the stage's start: a
        rate's stage by the scenario's arrival process at that rate, a concurrency's stage all
        due at once (the closed loop sends each when a slot frees). Ids are `s{index}-{k}`."""
        stage = self.scenario.stages[index]
        streams = _Streams.of(self.scenario.seed, phase=0, stage=index)
        if stage.rate_rps is None:
            times: Iterator[float] = itertools.repeat(0.0)
        else:
            arrival = dataclasses.replace(self.scenario.arrival, rate_rps=stage.rate_rps)
            times = self.process.times(arrival, streams.arrivals, self.trace)
        requests = self._build(streams, times, itertools.repeat(None), f"s{index}-", is_warmup=False)
        return itertools.islice(requests, stage.num_requests)

    def warmup(self) -> list[Request]:
        """Warmup requests: shaped like the measured ones, drawn from their own random stream.

        On a trace they take the lengths of randomly picked rows but not their shared
        prefixes, so they do not fill a prefix cache for the measured requests.
        """
        n = self.scenario.warmup_requests
        streams = _Streams.of(self.scenario.seed, phase=1)
        rows: Iterator[TraceRow | None] = itertools.repeat(None)
        if self.trace:
            picks = streams.order.integers(0, len(self.trace), size=n)
            rows = (
                TraceRow(0.0, r.input_length, r.output_length)
                for r in (self.trace[i] for i in picks)
            )
        return list(self._build(streams, itertools.repeat(0.0, n), rows, "warmup-", is_warmup=True))

    # -- building ---------------------------------------------------------------------

    def _build(
        self,
        streams: _Streams,
        times: Iterator[float],
        rows: Iterator[TraceRow | None],
        prefix: str,
        is_warmup: bool,
    ) -> Iterator[Request]:
        conversations = self._conversation_cycle(streams.order)
        prefixes = self._shared_prefixes()
        for i, (arrival_s, row) in enumerate(zip(times, rows, strict=False)):
            shared = 0
            if row is not None:
                prompt = self._trace_prompt(row, streams.prompt_tokens)
                max_tokens = row.output_length
            else:
                conversation = next(conversations) if self.conversations else None
                prompt = self._prompt(conversation, streams)
                max_tokens = self._output_length(conversation, streams)
                if prefixes is not None and is_warmup:  # same shape, nothing shared
                    prompt = self._random_tokens(self.scenario.prefix.length, streams.prompt_tokens) + prompt
                elif prefixes is not None:
                    prefix, shared = prefixes.pick(streams.prefix_groups)
                    prompt = prefix + prompt
            yield Request(
                id=f"{prefix}{i}",
                max_tokens=max_tokens,
                prompt_token_ids=prompt,
                sampling=self.sampling,
                arrival_s=float(arrival_s),
                is_warmup=is_warmup,
                shared_prefix_tokens=shared,
                images=request_images(self.scenario.images, self.scenario.seed, int(is_warmup), i),
            )

    def _random_tokens(self, n: int, rng: np.random.Generator) -> list[int]:
        return rng.choice(self._token_pool, size=n).tolist()

    def _prompt(self, conversation: Conversation | None, streams: _Streams) -> list[int]:
        cfg = self.scenario.prompt_tokens
        if cfg.dist == "dataset":
            ids = self._encode(conversation.prompt)
            return ids[: cfg.max] if cfg.max is not None else ids
        return self._random_tokens(
            sample_length(cfg, streams.prompt_lengths), streams.prompt_tokens
        )

    def _output_length(self, conversation: Conversation | None, streams: _Streams) -> int:
        cfg = self.scenario.output_tokens
        if cfg.dist == "dataset" and conversation.output_tokens is not None:
            return clip_length(cfg, conversation.output_tokens)
        if cfg.dist == "dataset":
            return clip_length(cfg, len(self._encode(conversation.completion)))
        return sample_length(cfg, streams.output_lengths)

    def _trace_prompt(self, row: TraceRow, rng: np.random.Generator) -> list[int]:
        """The row's blocks, each the same tokens wherever its hash id appears; then padding."""
        num_blocks = -(-row.input_length // TRACE_BLOCK_TOKENS)
        blocks = [self._trace_block(hash_id) for hash_id in row.hash_ids[:num_blocks]]
        ids = np.concatenate(blocks)[: row.input_length].tolist() if blocks else []
        return ids + self._random_tokens(row.input_length - len(ids), rng)

    def _trace_block(self, hash_id: int) -> np.ndarray:
        """A hash id's tokens, drawn once: a fresh generator and draw per use cost ~20 µs while
        the load runs. int32 keeps a long trace's distinct blocks at 2 KiB each."""
        block = self._trace_blocks.get(hash_id)
        if block is None:
            block_rng = np.random.default_rng([self.scenario.seed, hash_id])
            block = block_rng.choice(self._token_pool, size=TRACE_BLOCK_TOKENS).astype(np.int32)
            self._trace_blocks[hash_id] = block
        return block

    def _encode(self, text: str) -> list[int]:
        if text not in self._encoded:
            self._encoded[text] = self.tokenizer.encode(text)
        return self._encoded[text]

    def _conversation_cycle(self, rng: np.random.Generator) -> Iterator[Conversation]:
        """Conversations in a seeded order, reshuffled on each pass; short prompts skipped."""
        if not self.conversations:
            return
        min_prompt = _min_prompt_tokens(self.scenario.prompt_tokens)
        while True:
            usable = 0
            for index in rng.permutation(len(self.conversations)):
                conversation = self.conversations[index]
                if len(self._encode(conversation.prompt)) >= min_prompt:
                    usable += 1
                    yield conversation
            if not usable:
                raise DataError(
                    f"scenario.dataset: no conversation in {self.scenario.dataset} has a prompt "
                    f"of at least scenario.prompt_tokens.min={min_prompt} tokens"
                )


def _min_prompt_tokens(cfg: LengthConfig) -> int:
    return cfg.min if cfg.dist == "dataset" else 1


def longest_shared_prefix(prompts: list[list[int]]) -> int:
    """The most leading tokens any two prompts have in common (0 for fewer than two).

    Sorted, the prompt sharing the longest prefix with any other is its neighbour.
    """
    ordered = sorted(prompts)
    best = 0
    for a, b in zip(ordered, ordered[1:], strict=False):
        n = 0
        for x, y in zip(a, b, strict=False):
            if x != y:
                break
            n += 1
        best = max(best, n)
    return best
