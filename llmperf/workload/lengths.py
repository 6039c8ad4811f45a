"""Length distributions for prompts and outputs, picked by name from `LENGTHS`.

Every sample is rounded and clipped to [min, max] (and to at least 1 token).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from llmperf.errors import ConfigError
from llmperf.errors import check_positive as _positive


def fixed_length(cfg: LengthConfig, rng: np.random.Generator) -> float:
    return cfg.value


def uniform_length(cfg: LengthConfig, rng: np.random.Generator) -> float:
    return rng.integers(cfg.min, cfg.max, endpoint=True)


def normal_length(cfg: LengthConfig, rng: np.random.Generator) -> float:
    return rng.normal(cfg.mean, cfg.std)


def lognormal_length(cfg: LengthConfig, rng: np.random.Generator) -> float:
    """`mean` and `std` are those of the lengths themselves, not of their logarithm."""
    sigma2 = math.log1p((cfg.std / cfg.mean) ** 2)
    return rng.lognormal(math.log(cfg.mean) - sigma2 / 2, math.sqrt(sigma2))


@dataclass(frozen=True)
class LengthDist:
    sample: Callable[[LengthConfig, np.random.Generator], float] | None  # None: from the dataset
    required: tuple[str, ...] = ()


LENGTHS: dict[str, LengthDist] = {
    "fixed": LengthDist(fixed_length, ("value",)),
    "uniform": LengthDist(uniform_length, ("min", "max")),
    "normal": LengthDist(normal_length, ("mean", "std")),
    "lognormal": LengthDist(lognormal_length, ("mean", "std")),
    "dataset": LengthDist(None),
}


def clip_length(cfg: LengthConfig, length: float) -> int:
    upper = cfg.max if cfg.max is not None else math.inf
    return int(max(1, cfg.min, min(upper, round(length))))


def sample_length(cfg: LengthConfig, rng: np.random.Generator) -> int:
    sample = LENGTHS[cfg.dist].sample
    assert sample is not None, "dataset lengths are read from the dataset"
    return clip_length(cfg, sample(cfg, rng))


@dataclass
class LengthConfig:
    """Token counts: `fixed` uses value; `uniform` min..max; `normal`/`lognormal` mean and std
    (of the lengths themselves); `dataset` the lengths of the dataset's texts."""

    dist: str = "fixed"
    value: int | None = None
    mean: float | None = None
    std: float | None = None
    min: int = 1
    max: int | None = None

    def __post_init__(self) -> None:
        if self.dist not in LENGTHS:
            raise ConfigError("dist", self.dist, "unknown length distribution", LENGTHS)
        for name in LENGTHS[self.dist].required:
            if getattr(self, name) is None:
                raise ConfigError(name, None, f"the {self.dist!r} distribution needs it")
        _positive(self, "value", "mean", "min", "max")
        _positive(self, "std", strict=False)
        if self.max is not None and self.max < self.min:
            raise ConfigError("max", self.max, f"must be >= min ({self.min})")
