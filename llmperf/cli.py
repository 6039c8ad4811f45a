"""The `llmperf` command: a Hydra app over the config tree in the `scenarios` package.

Before Hydra runs, the command line is checked with Hydra's override parser and composer
(every job of a sweep), so bad input ends as one line on stderr and exit code 2,
not Hydra's multi-line report and exit code 1.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra import initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, OverrideParseException
from omegaconf import DictConfig

from llmperf.errors import UsageError, require
from llmperf.run.command_line import hydra_args_parser, sweep_jobs
from llmperf.run.compose import CONFIG_MODULE, CONFIG_NAME, compose_config
from llmperf.run.config import load_config, register_configs
from llmperf.run.runner import run_benchmark
from llmperf.workload.requests import check_inputs

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script and of `python -m llmperf`."""
    argv = expand_shorthands(sys.argv[1:] if argv is None else list(argv))
    register_configs()
    try:
        check_command_line(argv)
    except UsageError as err:
        _exit_with(err)
    sys.argv = [sys.argv[0], *argv]  # Hydra reads its arguments from sys.argv
    app = hydra.main(
        config_path=f"pkg://{CONFIG_MODULE}", config_name=CONFIG_NAME, version_base="1.3"
    )(run_job)
    try:
        app()
    except KeyboardInterrupt:  # outside the load (which handles SIGINT itself)
        print("llmperf: interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)


def run_job(cfg: DictConfig) -> None:
    """One Hydra job: a run in the job's output folder."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per HTTP request
    try:
        config = load_config(cfg)
        run = run_benchmark(config, Path(HydraConfig.get().runtime.output_dir), argv=sys.argv)
    except UsageError as err:
        _exit_with(err)
    if run.interrupted:
        print(f"llmperf: interrupted; what was measured is in {run.run_dir}", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)


def _exit_with(err: UsageError) -> None:
    message = " ".join(str(err).split("\n"))
    print(f"llmperf: error: {message}", file=sys.stderr)
    sys.exit(EXIT_USAGE)


# -- checking the command line ------------------------------------------------------------

# Hydra launchers that come from a plugin: (module, pip package) it needs, and the extra of
# llmperf that installs them (None: not one of llmperf's extras; pip installs the package).
_SUBMITIT = (("hydra_plugins.hydra_submitit_launcher", "hydra-submitit-launcher"),
             ("submitit", "submitit"))
_RAY = (("hydra_plugins.hydra_ray_launcher", "hydra-ray-launcher"), ("ray", "ray"))
LAUNCHER_NEEDS: dict[str, tuple[tuple[tuple[str, str], ...], str | None]] = {
    "submitit_local": (_SUBMITIT, "cluster"),
    "submitit_slurm": (_SUBMITIT, "cluster"),
    "ray": (_RAY, "ray"),
    "ray_aws": (_RAY, "ray"),
}

# Open maps inside the schema: their keys are the user's (a server's options, its environment).
OPEN_MAPS = ("engine.launch.args.", "engine.launch.env.", "engine.headers.", "engine.extra_body.")


def expand_shorthands(argv: list[str]) -> list[str]:
    """`engine.launch=vllm` -> `engine.launch.family=vllm`; `engine.launch.args.K=V` ->
    `++engine.launch.args.K=V` (a key of an open map is added or replaced, no `+` needed)."""
    out = []
    for arg in argv:
        if arg.startswith("engine.launch="):
            arg = "engine.launch.family=" + arg.partition("=")[2]
        elif arg.startswith(OPEN_MAPS):
            arg = "++" + arg
        out.append(arg)
    return out



def check_command_line(argv: list[str]) -> None:
    """Raise UsageError, naming the field, the value and the valid choices, for bad input."""
    args = hydra_args_parser().parse_args(argv)
    if args.help or args.hydra_help or args.version or args.info or args.shell_completion:
        return
    if args.config_path or args.config_dir:  # another config tree: Hydra reports on it itself
        return
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        overrides_parser = OverridesParser.create(config_loader=loader)
        parsed = []
        for text in args.overrides:
            try:
                parsed.append(overrides_parser.parse_override(text))
            except (OverrideParseException, HydraException):
                raise UsageError(
                    f"malformed override {text!r}: expected key=value, e.g. scenario.num_requests=100"
                ) from None
        for override in parsed:
            _check_launcher(override)
            _check_group_choice(override, loader)
        jobs = sweep_jobs(parsed) if args.multirun else [args.overrides]
        for job in jobs:
            check_job(job, args.config_name or CONFIG_NAME)


def check_job(overrides: list[str], config_name: str = CONFIG_NAME) -> None:
    """Compose one job's config and validate it, as the run will."""
    config = compose_config(overrides, config_name)
    check_inputs(config.scenario)
    path = None if config.model.path is None else Path(config.model.path).expanduser()
    if path is not None and _launches_llama_cpp(config):  # a GGUF file, or a folder's GGUF
        if not (path.is_file() or (path / "config.json").is_file()):
            raise UsageError(
                f"model.path={config.model.path!r}: no such GGUF file or checkpoint folder"
            )
    elif path is not None and not path.is_dir():
        raise UsageError(f"model.path={config.model.path!r}: no such checkpoint folder")


def _launches_llama_cpp(config) -> bool:
    launch = getattr(config.engine, "launch", None)
    return getattr(launch, "family", None) == "llama.cpp"


def _check_launcher(override) -> None:
    """`hydra/launcher=submitit_slurm` without its plugin: one line naming what installs it
    (before the group check, which would only say the launcher does not exist)."""
    if override.key_or_group != "hydra/launcher" or override.is_delete():
        return
    if override.value_type is None or override.is_sweep_override():
        return
    launcher = override.get_value_element_as_str()
    if launcher not in LAUNCHER_NEEDS:
        return
    modules, extra = LAUNCHER_NEEDS[launcher]
    for module, package in modules:
        require(module, extra, f"hydra/launcher={launcher}", package)


def _check_group_choice(override, loader) -> None:
    if override.is_delete() or override.value_type is None:
        return
    group = override.key_or_group
    options = loader.get_group_options(group)
    if not options:
        return  # not a config group: a field, checked when composed
    if override.is_sweep_override():
        if not override.is_discrete_sweep():
            return
        values = list(override.sweep_string_iterator())
    else:
        values = [override.get_value_element_as_str()]
    for value in values:
        if value not in options:
            raise UsageError(f"{group}={value!r}: no such {group}; valid: {', '.join(options)}")
