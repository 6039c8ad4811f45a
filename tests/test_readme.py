"""The README's tables against the code they describe."""

import dataclasses
import re
from pathlib import Path

import pytest

from llmperf.run.config import ENGINE_CONFIGS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("engine", sorted(ENGINE_CONFIGS))
def test_the_engine_options_table_lists_every_option_of_each_engine(engine):
    row = re.search(rf"^\| `{engine}` \| (.*) \|$", README, re.MULTILINE)
    assert row, f"no row for engine {engine} in the README's engine options table"
    # Option names are the backquoted words outside parentheses.
    listed = re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", row.group(1)))
    fields = [f.name for f in dataclasses.fields(ENGINE_CONFIGS[engine]) if f.name != "name"]
    assert sorted(listed) == sorted(fields)
