"""`llmperf-plan`: how many devices, which batch size, what it costs.

    llmperf-plan model=llama-3.1-70b hardware=h100-sxm precision=bf16 [scenario=chat] [tp=N] [--json]

Arguments are key=value (see USAGE); a bad one prints one line and exits 2.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from engines.reference.config import ModelConfig
from engines.reference.precision import PRECISIONS
from engines.reference.presets import get_preset, preset_names
from llmperf.errors import UsageError as ConfigUsageError
from llmperf.hardware.registry import resolve_profile
from llmperf.perf.planner import Plan, plan
from llmperf.perf.traffic import Traffic, traffic_from_scenario, unknown_traffic
from llmperf.run.compose import load_scenario

USAGE = """\
usage: llmperf-plan model=NAME|PATH hardware=NAME [precision=bf16] [scenario=NAME|FILE.yaml]
                    [tp=N] [concurrency=N] [rate_rps=R] [prompt_tokens=N] [output_tokens=N]
                    [context_len=N] [usd_per_hour=X] [--json]

  model          a preset ({presets}) or a checkpoint folder with config.json
  hardware       a profile in scenarios/hardware/ or auto
  precision      {precisions}
  scenario       lengths and concurrency (or rate) from a scenario YAML
  tp             tensor-parallel size (default: the fewest devices that hold the load)
  concurrency    sequences decoding at once; context_len: KV positions per sequence
                 (default prompt_tokens + output_tokens); explicit values override the scenario
  --json         print the plan as JSON instead of tables
"""

_INT_ARGS = ("tp", "concurrency", "prompt_tokens", "output_tokens", "context_len")
_FLOAT_ARGS = ("rate_rps", "usd_per_hour")
_STR_ARGS = ("model", "hardware", "precision", "scenario")
VALID_KEYS = (*_STR_ARGS, *_INT_ARGS, *_FLOAT_ARGS)


class UsageError(ValueError):
    pass


def parse_args(argv: Sequence[str]) -> tuple[dict[str, Any], bool]:
    """key=value arguments and the --json flag."""
    args: dict[str, Any] = {}
    as_json = False
    for arg in argv:
        if arg == "--json":
            as_json = True
            continue
        key, sep, value = arg.partition("=")
        if not sep or not value:
            raise UsageError(
                f"argument {arg!r} is not key=value; valid keys: {', '.join(VALID_KEYS)}"
            )
        if key not in VALID_KEYS:
            raise UsageError(f"unknown argument {key!r}; valid: {', '.join(VALID_KEYS)}")
        args[key] = _convert(key, value)
    for required in ("model", "hardware"):
        if required not in args:
            raise UsageError(f"missing {required}=...; see llmperf-plan --help")
    return args, as_json


def build_plan(args: dict[str, Any]) -> Plan:
    model = load_model(args["model"])
    precision = args.get("precision", "bf16")
    if precision not in PRECISIONS:
        raise UsageError(f"unknown precision {precision!r}; valid: {', '.join(PRECISIONS)}")
    overrides = {"usd_per_hour": args["usd_per_hour"]} if "usd_per_hour" in args else {}
    profile = resolve_profile({"name": args["hardware"], **overrides})
    fields: dict[str, Any] = {}
    unknown: dict[str, str] = {}
    if "scenario" in args:
        scenario = load_scenario(args["scenario"])
        fields.update(traffic_from_scenario(scenario, args["scenario"]))
        unknown = unknown_traffic(scenario, args["scenario"])
    explicit = {
        k: float(args[k])
        for k in ("prompt_tokens", "output_tokens", "context_len", "concurrency", "rate_rps")
        if k in args
    }
    if "rate_rps" in explicit:
        unknown.pop("concurrency", None)
    if "concurrency" in explicit:
        fields.pop("rate_rps", None)
    if "rate_rps" in explicit:
        fields.pop("concurrency", None)
    if "prompt_tokens" in explicit:
        fields.pop("prompt_tokens_max", None)
    fields.update(explicit)
    result = plan(model, precision, profile, Traffic(**fields), tp=args.get("tp"))
    result.notes.extend(note for key, note in unknown.items() if key not in explicit)
    return result


def load_model(spec: str) -> ModelConfig:
    if spec in preset_names():
        return get_preset(spec)
    if (Path(spec) / "config.json").is_file():
        return ModelConfig.from_path(spec)
    raise UsageError(
        f"model {spec!r} is neither a preset nor a folder with config.json; presets: {', '.join(preset_names())}"
    )


def render(p: Plan, console: Console) -> None:
    facts = Table(title=f"{p.model} · {p.precision} · {p.hardware}", show_header=False, box=None)
    facts.add_column(style="bold")
    facts.add_column()
    for label, value in (
        ("parameters", f"{p.params / 1e9:.2f} B"),
        ("weights", _gb(p.weight_bytes)),
        (f"weights per device at tp={p.tp}", _gb(p.weight_bytes_per_device)),
        ("KV cache per token", f"{p.kv_bytes_per_token / 1024:.0f} KiB"),
        ("KV cache per sequence", f"{_gb(p.kv_bytes_per_seq)} at {p.context_len:.0f} tokens"),
        (
            "usable memory per device",
            f"{_gb(p.usable_bytes_per_device)} ({p.runtime_reserve_fraction:.0%} reserve)",
        ),
        ("weights fit on one device", "yes" if p.weights_fit_on_one_device else "no"),
        ("devices for the weights", str(p.devices_for_weights)),
        (
            "devices needed",
            f"{p.devices_needed} (weights + KV for {p.concurrency:g} x {p.context_len:.0f} tokens, KV +{p.kv_overhead_fraction:.0%})",
        ),
        ("tensor parallel", str(p.tp)),
        ("largest batch", str(p.max_batch)),
        *((f"TTFT, {n}-token prompt", f"{s * 1e3:.1f} ms") for n, s in p.ttft_s_by_prompt.items()),
        ("operating batch", str(p.batch)),
        ("tokens/s per device", _maybe(p.tps_per_device, "{:.1f}")),
        ("usd/hour (all devices)", _maybe(p.usd_per_hour and p.usd_per_hour * p.tp, "{:.2f}")),
        (
            "usd per 1M tokens (in / out / all)",
            " / ".join(
                _maybe(x, "{:.3f}")
                for x in (
                    p.usd_per_1m_input_tokens,
                    p.usd_per_1m_output_tokens,
                    p.usd_per_1m_tokens,
                )
            ),
        ),
    ):
        facts.add_row(label, value)
    console.print(facts)
    table = Table(title=f"decode at {p.context_len:.0f} tokens of context, tp={p.tp}")
    for column in ("batch", "step ms", "tokens/s", "tokens/s/device", "bound", "usd/1M out"):
        table.add_column(column, justify="right")
    for row in p.decode:
        table.add_row(
            str(row.batch),
            f"{row.step_s * 1e3:.2f}",
            f"{row.tps:,.0f}",
            f"{row.tps_per_device:,.0f}",
            row.bound,
            _maybe(row.usd_per_1m_output_tokens, "{:.3f}"),
        )
    console.print(table)
    for note in p.notes:
        console.print(f"note: {note}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE.format(presets=", ".join(preset_names()), precisions=", ".join(PRECISIONS)))
        return 0
    try:
        args, as_json = parse_args(argv)
        result = build_plan(args)
    except (ValueError, OSError, yaml.YAMLError, ConfigUsageError) as err:
        print(f"llmperf-plan: error: {err}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        render(result, Console())
    return 0


def _convert(key: str, value: str) -> Any:
    kinds: dict[str, Callable[[str], Any]] = {
        **dict.fromkeys(_INT_ARGS, int),
        **dict.fromkeys(_FLOAT_ARGS, float),
    }
    if key not in kinds:
        return value
    try:
        number = kinds[key](value)
    except ValueError:
        raise UsageError(
            f"{key} must be a{'n integer' if kinds[key] is int else ' number'}, got {value!r}"
        ) from None
    if number <= 0 and key != "usd_per_hour":
        raise UsageError(f"{key} must be > 0, got {value!r}")
    return number


def _gb(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _maybe(x: float | None, fmt: str) -> str:
    return "—" if x is None else fmt.format(x)


if __name__ == "__main__":
    sys.exit(main())
