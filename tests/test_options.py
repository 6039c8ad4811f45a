"""Options declared once: the dataclasses are the YAML defaults, the engines' arguments
and the docs' tables."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from engines.hf_options import HFEngineConfig
from engines.options import EngineConfig
from engines.reference.options import ReferenceEngineConfig
from engines.registry import ENGINE_CONFIGS
from llmperf.errors import ConfigError
from llmperf.options import HELP, option
from llmperf.run import options_table
from llmperf.run.options_table import render_table, rewrite, schemas, stale_files


def test_the_committed_option_tables_are_what_the_dataclasses_say():
    stale = [str(p) for p in stale_files()]
    assert stale == [], "run: python -m llmperf.run.options_table"
    assert options_table.main(["--check"]) == 0


@pytest.mark.parametrize("engine", sorted(ENGINE_CONFIGS))
def test_the_readme_has_a_generated_table_for_every_engine(engine):
    readme = (options_table.ROOT / "README.md").read_text(encoding="utf-8")
    assert f"<!-- options: engine.{engine} -->\n| option | type | default | meaning |" in readme


@pytest.mark.parametrize("key", sorted(schemas()))
def test_every_option_has_help_text(key):
    schema = schemas()[key]
    missing = [
        f.name
        for f in dataclasses.fields(schema)
        if not f.metadata.get(HELP) and not (f.name == "name" and issubclass(schema, EngineConfig))
    ]
    assert missing == []


@dataclass
class _Demo(EngineConfig):
    name: str = "demo"
    rate_rps: float | None = option(None, "requests per second; null: as fast as it can")
    warm: bool = option(True, "send a warmup first")
    label: str = option("", "free text")
    tags: list[str] = option(help="labels", factory=lambda: ["a"])


def test_a_table_row_is_the_field_its_type_its_default_and_its_help():
    assert render_table(_Demo) == (
        "| option | type | default | meaning |\n"
        "|---|---|---|---|\n"
        "| `rate_rps` | `float \\| None` | `null` | requests per second; null: as fast as it can |\n"
        "| `warm` | `bool` | `true` | send a warmup first |\n"
        "| `label` | `str` | `\"\"` | free text |\n"
        "| `tags` | `list[str]` | `['a']` | labels |\n"
    )


def test_rewrite_fills_the_marked_block_and_leaves_the_rest():
    text = "intro\n<!-- options: demo -->\nold\n<!-- /options -->\noutro\n"
    out = rewrite(text, {"demo": _Demo})
    assert out == "intro\n<!-- options: demo -->\n" + render_table(_Demo) + "<!-- /options -->\noutro\n"
    assert rewrite(out, {"demo": _Demo}) == out  # idempotent
    with pytest.raises(ValueError, match="unknown options table 'nope'; valid: demo"):
        rewrite("<!-- options: nope -->\n<!-- /options -->", {"demo": _Demo})


@pytest.mark.parametrize("engine", sorted(ENGINE_CONFIGS))
def test_the_engine_yaml_only_picks_the_schema_so_its_defaults_are_the_dataclass(compose_config, engine):
    config = compose_config(f"engine={engine}")
    expected = ENGINE_CONFIGS.get(engine)()
    if engine == "synthetic":  # the preset sets its latencies; everything else is the schema's
        expected = dataclasses.replace(expected, ttft_s=0.02, prefill_s_per_token=0.00001, tpot_s=0.005)
    assert config.engine == expected


def test_an_override_reaches_the_engine_options_object(compose_config):
    config = compose_config("engine.batching=chunked", "engine.max_num_batched_tokens=64")
    assert type(config.engine) is ReferenceEngineConfig
    assert (config.engine.batching, config.engine.max_num_batched_tokens) == ("chunked", 64)


def test_options_check_their_values_naming_the_field():
    with pytest.raises(ConfigError, match=r"^max_num_seqs=0: must be > 0$"):
        ReferenceEngineConfig(max_num_seqs=0)
    with pytest.raises(ConfigError, match=r"^max_wait_ms=-1: must be >= 0$"):
        ReferenceEngineConfig(max_wait_ms=-1)
    with pytest.raises(ConfigError, match=r"^max_model_len=0: must be > 0$"):
        HFEngineConfig(max_model_len=0)
