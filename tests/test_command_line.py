"""Hydra's command line read with public API: the flags and a sweep's jobs.

Hydra's private parser and basic sweeper are the reference here (tests may look at
them; the package may not): if a Hydra release changes them, these tests say where.
"""

from __future__ import annotations

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from llmperf.errors import UsageError
from llmperf.run.command_line import hydra_args_parser, sweep_jobs


def parse(*texts: str):
    return OverridesParser.create().parse_overrides(list(texts))


def option_strings(parser) -> dict[str, tuple]:
    """Each flag -> (its other spellings, whether it takes a value, its choices)."""
    out = {}
    for action in parser._actions:
        if not action.option_strings:
            continue
        takes_value = action.nargs != 0
        for flag in action.option_strings:
            out[flag] = (tuple(sorted(action.option_strings)), takes_value, action.choices)
    return out


def test_the_parser_knows_every_flag_of_hydras_own():
    internal = pytest.importorskip("hydra._internal.utils", reason="Hydra moved its parser")
    theirs = option_strings(internal.get_args_parser())
    ours = option_strings(hydra_args_parser())
    theirs.pop("--version")  # ours is a switch: Hydra itself prints the version
    assert ours.pop("--version")[1] is False
    assert {f: (names, takes) for f, (names, takes, _) in ours.items()} == {
        f: (names, takes) for f, (names, takes, _) in theirs.items()
    }
    for flag, (_, _, choices) in theirs.items():
        assert list(ours[flag][2] or ()) == list(choices or ()), flag


def test_the_parser_reads_flags_and_overrides():
    args = hydra_args_parser().parse_args(["-m", "--cfg", "job", "scenario=chat", "a.b=1"])
    assert args.multirun and args.cfg == "job"
    assert args.overrides == ["scenario=chat", "a.b=1"]
    assert hydra_args_parser().parse_args(["--info"]).info == "all"


@pytest.mark.parametrize("argv", [["--cfg", "nope"], ["--no-such-flag"], ["--info", "x"]])
def test_a_bad_flag_raises_a_usage_error_naming_it(argv):
    with pytest.raises(UsageError, match=argv[-1].lstrip("-")):
        hydra_args_parser().parse_args(argv)


def test_sweep_jobs_by_hand():
    jobs = sweep_jobs(parse("engine.batching=static,continuous", "a=range(1,4,2)", "b=x"))
    assert jobs == [
        ["engine.batching=static", "a=1", "b=x"],
        ["engine.batching=static", "a=3", "b=x"],
        ["engine.batching=continuous", "a=1", "b=x"],
        ["engine.batching=continuous", "a=3", "b=x"],
    ]
    # a key given twice takes its last value, in the place of its first
    assert sweep_jobs(parse("a=1,2", "b=3", "a=5")) == [["a=5", "b=3"]]
    assert sweep_jobs([]) == [[]]


@pytest.mark.parametrize(
    "texts",
    [
        ("scenario=chat,burst", "scenario.arrival.rate_rps=range(2,20,4)", "engine.tp=2"),
        ("+x=1,2", "~y", "z='a,b'", "w=[1,2]"),
        ("a=glob(*)",),
        ("a=1", "a=2,3", "b=choice(p,q)", "c=sort(3,1,2)"),
    ],
)
def test_sweep_jobs_match_hydras_basic_sweeper(texts):
    sweeper = pytest.importorskip(
        "hydra._internal.core_plugins.basic_sweeper", reason="Hydra moved its basic sweeper"
    )
    overrides = parse(*texts)
    try:
        expected = sweeper.BasicSweeper.split_arguments(overrides, None)[0]
    except Exception as err:  # glob() needs the config's options: Hydra refuses it here too
        with pytest.raises(type(err)):
            sweep_jobs(overrides)
        return
    assert sweep_jobs(overrides) == expected


def test_an_interval_sweep_is_a_usage_error_naming_it():
    with pytest.raises(UsageError, match=r"scenario.arrival.rate_rps=interval\(1,2\).*range"):
        sweep_jobs(parse("scenario.arrival.rate_rps=interval(1,2)"))
