"""The hardware profile: datasheet ceilings and price, one YAML per device in scenarios/hardware/."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")


@dataclass
class HardwareProfile:
    name: str
    kind: str = "gpu"  # "gpu" or "cpu"
    memory_bytes: float | None = None
    peak_mem_bw_bytes_per_s: float | None = None  # datasheet (or probed, for "cpu")
    peak_flops: dict[str, float | None] = field(default_factory=dict)  # dense, per dtype
    usd_per_hour: float | None = None
    tdp_w: float | None = None
    interconnect_bytes_per_s: float | None = None  # per device, for tensor parallelism
    source: str = "datasheet"  # "datasheet", "probe" or "detected"

    def __post_init__(self) -> None:
        if self.kind not in ("gpu", "cpu"):
            raise ValueError(f"hardware kind must be gpu or cpu, got {self.kind!r}")
        unknown = set(self.peak_flops) - set(DTYPES)
        if unknown:
            raise ValueError(f"unknown dtypes in peak_flops: {sorted(unknown)}; valid: {', '.join(DTYPES)}")

    def flops_for(self, dtype: str) -> float | None:
        """Peak dense FLOP/s for a compute dtype (int8 and fp8 weight-only run in bf16)."""
        return self.peak_flops.get(dtype)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HardwareProfile:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in known})
