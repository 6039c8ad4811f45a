"""What a server family knows: its default binary, arguments and environment, how its command
line is written, and where it says its version. One subclass per family, one file each."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Protocol


class FamilyOptions(Protocol):
    """What a family reads of `engine.launch` (engines/launch/options.py: LaunchOptions)."""

    command: list[str] | None
    args: dict[str, Any]
    env: dict[str, Any]
    binary: str | None


class ServerFamily:
    """One launch of a server. The defaults fit an OpenAI-compatible server whose options
    are written `--kebab-case`."""

    name = "generic"
    health_path = "/health"
    models_path = "/v1/models"
    metrics_path: str | None = "/metrics"
    # (path, JSON key) pairs tried in order once the server is ready
    version_routes: tuple[tuple[str, str], ...] = (("/version", "version"),)
    serves_presets = False  # True: a preset name will do where no model.path is given

    def __init__(self, options: FamilyOptions) -> None:
        self.options = options
        self.binary: str | None = None

    # -- what a family changes ---------------------------------------------------------

    def default_binary(self) -> str | None:
        return None

    def default_args(self) -> dict[str, Any]:
        return {}

    def default_env(self) -> dict[str, str]:
        return {}

    def command(self, model: str, host: str, port: int) -> list[str]:
        raise NotImplementedError

    def format_args(self, args: dict[str, Any]) -> list[str]:
        return kebab_args(args)

    def install_hint(self) -> str:
        return ""

    def local_version(self) -> str | None:
        """The version when none of `version_routes` says it."""
        return None

    def label_version(self, version: str) -> str:
        """The version as recorded: what the server said, plus what it does not say."""
        return version

    # -- shared --------------------------------------------------------------------------

    def args(self) -> dict[str, Any]:
        return {**self.default_args(), **self.options.args}

    def env(self) -> dict[str, str]:
        return {**self.default_env(), **{k: str(v) for k, v in self.options.env.items()}}

    def resolve_binary(self) -> str:
        """The executable's path; raise FileNotFoundError naming what was looked for."""
        wanted = self.options.binary or self.default_binary()
        if wanted is None:
            raise FileNotFoundError(f"the {self.name} family needs engine.launch.binary")
        path = Path(wanted).expanduser()
        if "/" in wanted:
            if not path.is_file():
                raise FileNotFoundError(f"no executable {wanted!r}{self.install_hint()}")
            self.binary = str(path)
        else:
            found = shutil.which(wanted)
            if found is None:
                raise FileNotFoundError(f"no executable {wanted!r} on PATH{self.install_hint()}")
            self.binary = found
        return self.binary


def kebab_args(args: dict[str, Any]) -> list[str]:
    """{max_num_seqs: 8, enforce_eager: true, enable_prefix_caching: false, x: null}
    -> --max-num-seqs 8 --enforce-eager --no-enable-prefix-caching (null: left out)."""
    out: list[str] = []
    for key, value in args.items():
        flag = "--" + str(key).replace("_", "-")
        if value is None:
            continue
        if value is True:
            out.append(flag)
        elif value is False:
            out.append("--no-" + flag[2:])
        elif isinstance(value, (list, tuple)):
            out += [flag, *(str(v) for v in value)]
        elif isinstance(value, dict):  # vLLM's JSON options: --compilation-config '{"level": 0}'
            out += [flag, json.dumps(value)]
        else:
            out += [flag, str(value)]
    return out
