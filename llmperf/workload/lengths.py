"""Length distributions for prompts and outputs, picked by name from `LENGTHS`, and
their options (`LengthConfig`, the scenario's `prompt_tokens` and `output_tokens`).

Every sample is rounded and clipped to [min, max] (and to at least 1 token).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from llmperf.errors import ConfigError
from llmperf.options import check_positive, option
from llmperf.registry import Registry


@dataclass
class LengthConfig:
    """Token counts: `fixed` uses value; `uniform` min..max; `normal`/`lognormal` mean and std
    (of the lengths themselves); `dataset` the lengths of the dataset's texts."""

    dist: str = option("fixed", "fixed | uniform | normal | lognormal | dataset")
    value: int | None = option(None, "fixed: the length")
    mean: float | None = option(None, "normal, lognormal: mean of the lengths")
    std: float | None = option(None, "normal, lognormal: standard deviation of the lengths")
    min: int = option(1, "every sample is clipped to at least this")
    max: int | None = option(None, "every sample is clipped to at most this (uniform: the upper end)")

    def __post_init__(self) -> None:
        LENGTHS.check("dist", self.dist)
        for name in LENGTHS.get(self.dist).required:
            if getattr(self, name) is None:
                raise ConfigError(name, None, f"the {self.dist!r} distribution needs it")
        check_positive(self, "value", "mean", "min", "max")
        check_positive(self, "std", strict=False)
        if self.max is not None and self.max < self.min:
            raise ConfigError("max", self.max, f"must be >= min ({self.min})")


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


LENGTHS: Registry[LengthDist] = Registry(
    "length distribution",
    {
        "fixed": LengthDist(fixed_length, ("value",)),
        "uniform": LengthDist(uniform_length, ("min", "max")),
        "normal": LengthDist(normal_length, ("mean", "std")),
        "lognormal": LengthDist(lognormal_length, ("mean", "std")),
        "dataset": LengthDist(None),
    },
)


def clip_length(cfg: LengthConfig, length: float) -> int:
    upper = cfg.max if cfg.max is not None else math.inf
    return int(max(1, cfg.min, min(upper, round(length))))


def sample_length(cfg: LengthConfig, rng: np.random.Generator) -> int:
    sample = LENGTHS.get(cfg.dist).sample
    assert sample is not None, "dataset lengths are read from the dataset"
    return clip_length(cfg, sample(cfg, rng))
