"""One named verdict on a run (llmperf/measure/validity.py's checks), and how its details
write a duration."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Check:
    check: str
    ok: bool
    detail: str
    blocking: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Check:
        return cls(str(d.get("check")), bool(d.get("ok")), str(d.get("detail") or ""),
                   bool(d.get("blocking", True)))


def ms(seconds: float) -> str:
    """A duration in a check's detail: milliseconds, one decimal."""
    return f"{seconds * 1e3:.1f} ms"
