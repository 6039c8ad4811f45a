"""What the server saw of each request (`ServedRequest`) and the JSONL log of them.

Every request the server answers becomes a `ServedRequest`: when it arrived, was
scheduled, and produced its first and last tokens, and how many tokens. Those feed the
/metrics histograms (llmperf/serve/prometheus_metrics.py) and, with `request_log=PATH`,
one JSON line each, so a client-side run (`llmperf engine=openai`) can be checked
against the server request by request.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO


@dataclass
class ServedRequest:
    """One request as the server saw it. Times are perf_counter() seconds of the server process."""

    id: str
    endpoint: str
    arrival_s: float
    arrival_unix_s: float
    client_request_id: str | None = None  # the X-Request-Id header, to join with client records
    scheduled_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float | None:
        return None if self.last_token_s is None else self.last_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        if self.num_output_tokens < 2 or self.first_token_s is None:
            return None
        return (self.last_token_s - self.first_token_s) / (self.num_output_tokens - 1)

    @property
    def queue_s(self) -> float | None:
        return None if self.scheduled_s is None else self.scheduled_s - self.arrival_s

    @property
    def prefill_s(self) -> float | None:
        if self.scheduled_s is None or self.first_token_s is None:
            return None
        return self.first_token_s - self.scheduled_s

    @property
    def decode_s(self) -> float | None:
        if self.first_token_s is None:
            return None
        return self.last_token_s - self.first_token_s

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(ttft_s=self.ttft_s, e2e_s=self.e2e_s, tpot_s=self.tpot_s, queue_s=self.queue_s)
        return d


class RequestLog:
    """Appends one JSON line per finished request, flushed, so a killed server keeps what it logged."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO = self.path.open("a", encoding="utf-8")

    def write(self, req: ServedRequest) -> None:
        self._file.write(json.dumps(req.to_dict()) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()
