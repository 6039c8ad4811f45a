"""The hardware profile: datasheet ceilings and price, one YAML per device in scenarios/hardware/.

Two kinds of ceiling live side by side: `peak_*` are datasheet figures (null
where no datasheet applies, as for a CPU) and `measured_*` are what a probe
measured on this machine (see `llmperf.hardware.probe`). The roofline reports
against both when both are known.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
# torch's names, as engines report their compute dtype
DTYPE_ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "int8": "int8"}
KINDS = ("gpu", "cpu")
SOURCES = ("datasheet", "probe", "detected")
_POSITIVE_FIELDS = (
    "memory_bytes",
    "peak_mem_bw_bytes_per_s",
    "measured_mem_bw_bytes_per_s",
    "measured_stream_bw_bytes_per_s",
    "measured_layer_overhead_s",
    "tdp_w",
    "interconnect_bytes_per_s",
)


@dataclass
class HardwareProfile:
    name: str
    kind: str = "gpu"  # "gpu" or "cpu"
    memory_bytes: float | None = None
    peak_mem_bw_bytes_per_s: float | None = None  # datasheet
    peak_flops: dict[str, float | None] = field(default_factory=dict)  # datasheet, dense, per dtype
    measured_mem_bw_bytes_per_s: float | None = None  # probe: large-tensor read
    measured_stream_bw_bytes_per_s: float | None = None  # probe: decode-like weight streaming
    measured_layer_overhead_s: float | None = None  # probe: fixed cost per layer of a step
    measured_flops: dict[str, float | None] = field(
        default_factory=dict
    )  # probe: matmul, per dtype
    usd_per_hour: float | None = None
    tdp_w: float | None = None
    interconnect_bytes_per_s: float | None = (
        None  # per device, one direction, for tensor parallelism
    )
    device_name: str | None = None  # what the driver calls it, when detected
    source: str = "datasheet"  # "datasheet", "probe" or "detected"

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("hardware profile needs a name")
        if self.kind not in KINDS:
            raise ValueError(f"hardware.kind {self.kind!r} is not valid; valid: {', '.join(KINDS)}")
        if self.source not in SOURCES:
            raise ValueError(
                f"hardware.source {self.source!r} is not valid; valid: {', '.join(SOURCES)}"
            )
        for name in _POSITIVE_FIELDS:
            setattr(self, name, _number(f"hardware.{name}", getattr(self, name), positive=True))
        self.usd_per_hour = _number("hardware.usd_per_hour", self.usd_per_hour, positive=False)
        self.peak_flops = _flops_table("hardware.peak_flops", self.peak_flops)
        self.measured_flops = _flops_table("hardware.measured_flops", self.measured_flops)

    # -- ceilings ----------------------------------------------------------------

    def mem_bw(self, peak: str = "best") -> float | None:
        """Memory bandwidth in bytes/s: `datasheet`, `measured`, `best` (datasheet, else
        measured), or `sustained` (what the probe saw decode-like weight streaming sustain,
        where it measured that (CPU), else `best`): the figure step-time predictions use."""
        if peak == "sustained":
            return self.measured_stream_bw_bytes_per_s or self.mem_bw("best")
        return _pick(peak, self.peak_mem_bw_bytes_per_s, self.measured_mem_bw_bytes_per_s)

    def flops(self, dtype: str, peak: str = "best") -> float | None:
        """Dense FLOP/s for `dtype`: `datasheet`, `measured`, or `best` (datasheet, else measured)."""
        dtype = canonical_dtype(dtype)
        peak = "best" if peak == "sustained" else peak
        return _pick(peak, self.peak_flops.get(dtype), self.measured_flops.get(dtype))

    def peak_source(self) -> str | None:
        """Which ceiling `best` picks: "datasheet", "measured", or None when neither is known."""
        if self.peak_mem_bw_bytes_per_s is not None:
            return "datasheet"
        if self.measured_mem_bw_bytes_per_s is not None:
            return "measured"
        return None

    def has_measured(self) -> bool:
        return self.measured_mem_bw_bytes_per_s is not None or any(
            v is not None for v in self.measured_flops.values()
        )

    def scaled(self, num_devices: int) -> HardwareProfile:
        """`num_devices` of these working as one (tensor parallel): bandwidth, FLOP/s, memory and price add up."""

        def times(v: float | None) -> float | None:
            return None if v is None else v * num_devices

        return replace(
            self,
            name=f"{num_devices}x {self.name}",
            memory_bytes=times(self.memory_bytes),
            peak_mem_bw_bytes_per_s=times(self.peak_mem_bw_bytes_per_s),
            measured_mem_bw_bytes_per_s=times(self.measured_mem_bw_bytes_per_s),
            measured_stream_bw_bytes_per_s=times(self.measured_stream_bw_bytes_per_s),
            peak_flops={k: times(v) for k, v in self.peak_flops.items()},
            measured_flops={k: times(v) for k, v in self.measured_flops.items()},
            usd_per_hour=times(self.usd_per_hour),
            tdp_w=times(self.tdp_w),
        )

    # -- (de)serialization -------------------------------------------------------

    def with_overrides(self, **overrides: Any) -> HardwareProfile:
        """A copy with some fields replaced (validated), e.g. `usd_per_hour=3.0`."""
        _check_fields(overrides)
        return replace(self, **overrides)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HardwareProfile:
        """Build and validate a profile from a plain dict (a YAML file, a resolved config)."""
        _check_fields(d)
        if "name" not in d:
            raise ValueError("hardware profile needs a name")
        return cls(**dict(d))


def canonical_dtype(dtype: str) -> str:
    """ "bf16" for "bf16", "bfloat16" or "torch.bfloat16"."""
    name = str(dtype).removeprefix("torch.")
    return DTYPE_ALIASES.get(name, name)


def field_names() -> list[str]:
    return list(HardwareProfile.__dataclass_fields__)


def _check_fields(d: dict[str, Any]) -> None:
    unknown = sorted(set(d) - set(field_names()))
    if unknown:
        raise ValueError(
            f"unknown hardware field {unknown[0]!r}; valid: {', '.join(field_names())}"
        )


def _number(label: str, value: Any, positive: bool) -> float | None:
    """A float from a number or numeric string (YAML 1.1 reads `3.35e12` as a string)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{label} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{label} must be a number, got {value!r}") from None
    if number < 0 or (positive and number == 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{label} must be {bound}, got {value!r}")
    return number


def _flops_table(label: str, table: Any) -> dict[str, float | None]:
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise ValueError(f"{label} must be a mapping of dtype to FLOP/s, got {table!r}")
    unknown = sorted(set(table) - set(DTYPES))
    if unknown:
        raise ValueError(f"unknown dtype {unknown[0]!r} in {label}; valid: {', '.join(DTYPES)}")
    return {k: _number(f"{label}.{k}", v, positive=True) for k, v in table.items()}


def _pick(peak: str, datasheet: float | None, measured: float | None) -> float | None:
    if peak == "datasheet":
        return datasheet
    if peak == "measured":
        return measured
    if peak == "best":
        return datasheet if datasheet is not None else measured
    raise ValueError(f"peak {peak!r} is not valid; valid: best, datasheet, measured")
