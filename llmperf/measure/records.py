"""What the client saw of each request, one JSON line per request in `requests.jsonl`.

Times are seconds from the start of the run (the load generator's clock origin).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import IO, Any

import orjson

EMPTY_OUTPUT = "empty output"  # the error of a request that ended without a token


@dataclass
class RequestRecord:
    id: str
    arrival_s: float  # intended arrival (closed loop: when a slot freed)
    dispatch_s: float  # handed to the engine
    first_token_s: float | None  # first token (or chunk) received
    end_s: float  # last token received; for a request with no token, when its stream ended
    token_times_s: list[float] = field(default_factory=list)  # one per token-carrying event
    # Tokens in each of those events, kept only once one carried several (a chunk of a
    # speculative decoder or of a server's stream interval); null: one token each.
    chunk_tokens: list[int] | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    finish_reason: str | None = None  # "length", "stop", "abort" or "error"
    error: str | None = None
    warmup: bool = False
    admitted_s: float | None = None  # the engine took it from its queue, if the engine tells
    session_id: str | None = None  # multi-turn sessions: the session and the turn's index
    turn: int = 0
    shared_prefix_tokens: int = 0  # leading prompt tokens an earlier request already sent
    reasoning_tokens: int = 0  # of output_tokens, those streamed as reasoning content
    first_answer_token_s: float | None = None  # first token that is not reasoning
    prompt_token_ids: list[int] | None = None  # with scenario.record_tokens only
    output_token_ids: list[int] | None = None
    token_count_source: str | None = None  # engines.base.TOKEN_COUNT_SOURCES; None: failed
    # The choice (of n) each token_times_s event belongs to, kept only once one was not
    # choice 0; null: all choice 0.
    token_choices: list[int] | None = None
    response: str = "stream"  # engines.base.RESPONSES: whole and embedding have no token times
    pool_wait_s: float | None = None  # waiting for a connection of the client's pool (HTTP)
    connect_s: float | None = None  # HTTP: opening a new connection for it (None: a kept-alive one)
    written_s: float | None = None  # HTTP: the request's last byte written (the records' clock)
    headers_s: float | None = None  # HTTP: the response's headers received
    worker: int = 0  # the load-generator process that sent it (scenario.client.workers)
    node: str | None = None  # scenario.client.backend=ray: the cluster node of that worker
    # Waiting for a slot under scenario.arrival.max_concurrency: from arrival_s to when a
    # request in flight ended and freed one (0.0: no cap, or a slot was free)
    client_queue_s: float = 0.0
    stage: int = 0  # the scenario.stages entry it belongs to (0 without stages)
    image_bytes: int = 0  # encoded image files sent with the prompt (scenario.images)
    image_tokens: int | None = None  # of input_tokens, the images' (the server's usage); null: not reported

    @property
    def ok(self) -> bool:
        return self.error is None and self.finish_reason not in ("error", "abort")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{"first_token_s": None, **{k: v for k, v in d.items() if k in known}})


class RecordWriter:
    """Writes records to a fresh JSONL file, flushing each line, so a killed run keeps what
    it measured (and a run repeated into the same folder does not mix with the last one)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[bytes] | None = None

    def __enter__(self) -> RecordWriter:
        self._file = self.path.open("wb")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def write(self, record: RequestRecord) -> None:
        # orjson writes a dataclass as json.dumps(asdict(...)) would, in a 40th of the time
        self._file.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
        self._file.flush()
