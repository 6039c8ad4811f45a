"""A ray backend worker lost mid-run (backends/ray_pool.py notices it): what is said of it,
and its requests that were in flight, recorded as failed with `worker lost`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engines.base import Request
from llmperf.measure.records import RequestRecord

LOST = "worker lost"


@dataclass(frozen=True)
class LostWorker:
    worker: int
    node: str | None
    at_s: float  # on the run's clock: when the coordinator noticed
    in_flight: int  # its requests recorded as `worker lost`
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"worker": self.worker, "node": self.node, "at_s": self.at_s,
                "in_flight": self.in_flight, "reason": self.reason}


def in_flight(requests: list[Request], recorded: set[str], slots: int | None,
              elapsed_s: float) -> list[Request]:
    """A lost worker's requests that were sent and had no record: in an open loop those due
    `elapsed_s` into the measured phase (one due between the loss and its notice, at most
    POLL_S, counts too); in a closed loop its next `slots` requests, in the order its users
    take them."""
    if slots is None:
        return [r for r in requests if r.arrival_s <= elapsed_s and r.id not in recorded]
    unrecorded = [r for r in requests if r.id not in recorded]
    return unrecorded[: max(0, min(slots, len(requests) - len(recorded)))]


def lost_record(request: Request, worker: int, node: str | None, start_s: float,
                now_s: float) -> RequestRecord:
    sent_s = min(start_s + request.arrival_s, now_s)  # a closed loop's send time is not known
    return RequestRecord(id=request.id, arrival_s=sent_s, dispatch_s=sent_s, first_token_s=None,
                         end_s=now_s, finish_reason="error", error=LOST, worker=worker, node=node)
