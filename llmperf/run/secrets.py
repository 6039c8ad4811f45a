"""Secrets kept out of the run folder: `engine.api_key` and every `engine.headers` value, in
config.yaml, summary.json's engine options and environment.json's command line.

A header or key given as `${oc.env:NAME}` is resolved when the config is built; what the run
folder keeps (config.yaml, environment.json's command line) shows the reference, never the
value: a resolved value is masked, and a command-line value is kept only while it is still a
`${...}` reference.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

MASK = "***"
NOT_SECRET = (None, "EMPTY")  # the OpenAI client's placeholder key is no secret
SECRET_KEYS = ("engine.api_key=", "engine.headers.", "engine.headers=")


def masked_config(config: Any) -> DictConfig:
    """The config as config.yaml writes it, its secrets masked."""
    tree = OmegaConf.structured(config)
    engine = tree.get("engine")
    if engine is None:
        return tree
    if engine.get("api_key") not in NOT_SECRET:
        engine.api_key = MASK
    headers = engine.get("headers")
    if headers:
        for name in list(headers):
            headers[name] = MASK
    return tree


def masked_engine(engine: dict[str, Any]) -> dict[str, Any]:
    """The engine's options as a dict (summary.json's `engine.config`), its secrets masked."""
    out = dict(engine)
    if out.get("api_key") not in NOT_SECRET:
        out["api_key"] = MASK
    if out.get("headers"):
        out["headers"] = {name: MASK for name in out["headers"]}
    return out


def masked_argv(argv: list[str]) -> list[str]:
    """The command line with each secret-bearing override's value masked, unless it is a
    `${...}` reference (what the user should pass)."""
    out = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        bare = key.lstrip("+~") + "="
        if sep and bare.startswith(SECRET_KEYS) and not value.startswith("${") and value not in ("EMPTY", "null"):
            arg = f"{key}={MASK}"
        out.append(arg)
    return out
