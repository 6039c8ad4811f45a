"""Hydra's command line, read with public API only: its flags, and the jobs a sweep makes.

Hydra keeps its argument parser and its basic sweeper's expansion in `hydra._internal`,
which may change in any release. The command line is checked before Hydra runs, so
this module mirrors the flags of Hydra 1.3's parser (a test compares them with
Hydra's own) and expands a sweep the way the basic sweeper does, from overrides
parsed by the public `OverridesParser`.
"""

from __future__ import annotations

import argparse
import itertools
from typing import NoReturn

from hydra.core.override_parser.types import Override

from llmperf.errors import UsageError

INFO_CHOICES = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing its usage text and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def hydra_args_parser() -> argparse.ArgumentParser:
    """A parser for the arguments `@hydra.main` takes: its flags, then the overrides.

    Flags that print and exit (--version) are plain switches here: Hydra acts on them.
    """
    parser = _Parser(prog="llmperf", add_help=False)
    switches = (
        ("--help", "-h"),
        ("--hydra-help",),
        ("--version",),
        ("--resolve",),
        ("--run", "-r"),
        ("--multirun", "-m"),
        ("--shell-completion", "-sc"),
    )
    for flags in switches:
        parser.add_argument(*flags, action="store_true")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--cfg", "-c", choices=["job", "hydra", "all"])
    parser.add_argument("--package", "-p")
    parser.add_argument("--config-path", "-cp")
    parser.add_argument("--config-name", "-cn")
    parser.add_argument("--config-dir", "-cd")
    parser.add_argument("--experimental-rerun")
    parser.add_argument("--info", "-i", const="all", nargs="?", choices=INFO_CHOICES)
    return parser


def sweep_jobs(overrides: list[Override]) -> list[list[str]]:
    """The overrides of each job of a sweep, in the order Hydra's basic sweeper runs them.

    Each key takes its last value on the command line; a list or range sweep gives one
    job per value, and the jobs are the product of the keys' values.
    """
    values_by_key: dict[str, list[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        if not override.is_sweep_override():
            values_by_key[key] = [f"{key}={override.get_value_element_as_str()}"]
        elif override.is_discrete_sweep():
            values_by_key[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            raise UsageError(
                f"{override.input_line}: an interval sweep needs a sweeper plugin (such as "
                "Optuna's); give a list (a,b,c) or a range(start,stop,step)"
            )
    return [list(job) for job in itertools.product(*values_by_key.values())]
