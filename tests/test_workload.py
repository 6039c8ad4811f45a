"""Arrival processes, length distributions, datasets, traces and seeded request lists."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from scipy import stats

from engines.synthetic import ByteTokenizer
from llmperf.errors import ConfigError, DataError
from llmperf.workload.arrivals import ARRIVALS, ArrivalConfig
from llmperf.workload.datasets import load_sharegpt
from llmperf.workload.lengths import LengthConfig, sample_length
from llmperf.workload.requests import Workload
from llmperf.workload.scenario import ScenarioConfig
from llmperf.workload.trace import TRACE_BLOCK_TOKENS, load_trace

SHAREGPT_SAMPLE = "pkg://scenarios/data/sharegpt_sample.jsonl"
TRACE_SAMPLE = "pkg://scenarios/data/mooncake_sample.jsonl"


def arrival_times(n: int, seed: int = 0, **arrival) -> np.ndarray:
    cfg = ArrivalConfig(**arrival)
    times = ARRIVALS[cfg.process].times(cfg, np.random.default_rng(seed), [])
    return np.fromiter(itertools.islice(times, n), dtype=float)


def test_poisson_gaps_pass_ks_test_against_exponential():
    gaps = np.diff(arrival_times(5000, process="poisson", rate_rps=20.0))
    result = stats.kstest(gaps, "expon", args=(0, 1 / 20.0))
    assert result.pvalue > 0.01
    assert gaps.mean() == pytest.approx(1 / 20.0, rel=0.05)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_gaps_have_cv_one_over_sqrt_burstiness(burstiness):
    gaps = np.diff(arrival_times(20000, process="gamma", rate_rps=10.0, burstiness=burstiness))
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(burstiness), rel=0.05)
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)


def test_constant_offline_and_closed_times():
    assert arrival_times(4, process="constant", rate_rps=4.0) == pytest.approx([0, 0.25, 0.5, 0.75])
    assert list(arrival_times(3, process="offline")) == [0, 0, 0]
    assert ARRIVALS["closed"].closed_loop and not ARRIVALS["poisson"].closed_loop


@pytest.mark.parametrize(
    ("cfg", "low", "high", "mean", "std"),
    [
        (LengthConfig(dist="uniform", min=10, max=20), 10, 20, 15, np.sqrt((11**2 - 1) / 12)),
        (LengthConfig(dist="normal", mean=200, std=20), 1, None, 200, 20),
        (LengthConfig(dist="lognormal", mean=300, std=150), 1, None, 300, 150),
    ],
)
def test_length_distributions_match_their_moments(cfg, low, high, mean, std):
    rng = np.random.default_rng(1)
    lengths = np.array([sample_length(cfg, rng) for _ in range(20000)])
    assert lengths.min() >= low and (high is None or lengths.max() <= high)
    assert lengths.mean() == pytest.approx(mean, rel=0.03)
    assert lengths.std() == pytest.approx(std, rel=0.05)


def test_lengths_are_clipped_and_fixed_is_exact():
    rng = np.random.default_rng(0)
    clipped = [
        sample_length(LengthConfig(dist="normal", mean=100, std=80, min=50, max=120), rng)
        for _ in range(500)
    ]
    assert min(clipped) == 50 and max(clipped) == 120
    assert sample_length(LengthConfig(dist="fixed", value=7), rng) == 7


def chat_scenario(**changes) -> ScenarioConfig:
    base = dict(
        num_requests=20,
        warmup_requests=3,
        arrival=ArrivalConfig(process="poisson", rate_rps=5.0),
        prompt_tokens=LengthConfig(dist="lognormal", mean=100, std=50, max=400),
        output_tokens=LengthConfig(dist="uniform", min=5, max=50),
    )
    return ScenarioConfig(**{**base, **changes})


def as_tuples(requests):
    return [
        (r.id, r.arrival_s, tuple(r.prompt_token_ids), r.max_tokens, r.is_warmup) for r in requests
    ]


def test_same_seed_gives_identical_requests():
    tokenizer = ByteTokenizer()
    first = Workload(chat_scenario(seed=3), tokenizer)
    second = Workload(chat_scenario(seed=3), tokenizer)
    assert as_tuples(first.requests()) == as_tuples(second.requests())
    assert as_tuples(first.warmup()) == as_tuples(second.warmup())
    assert as_tuples(first.requests()) == as_tuples(first.requests())  # each call starts over
    other = Workload(chat_scenario(seed=4), tokenizer)
    assert as_tuples(other.requests()) != as_tuples(first.requests())


def test_each_part_has_its_own_random_stream():
    tokenizer = ByteTokenizer()
    base = list(Workload(chat_scenario(), tokenizer).requests())
    longer = list(
        Workload(
            chat_scenario(output_tokens=LengthConfig(dist="fixed", value=99)), tokenizer
        ).requests()
    )
    assert [r.arrival_s for r in base] == [r.arrival_s for r in longer]
    assert [r.prompt_token_ids for r in base] == [r.prompt_token_ids for r in longer]
    assert {r.max_tokens for r in longer} == {99}
    more_warmup = list(Workload(chat_scenario(warmup_requests=9), tokenizer).requests())
    assert as_tuples(more_warmup) == as_tuples(base)


def test_requests_follow_scenario_shape():
    workload = Workload(chat_scenario(), ByteTokenizer())
    requests = list(workload.requests())
    warmup = workload.warmup()
    assert len(requests) == 20 and [r.id for r in requests] == [str(i) for i in range(20)]
    assert [r.id for r in warmup] == ["warmup-0", "warmup-1", "warmup-2"]
    assert all(r.is_warmup and r.arrival_s == 0.0 for r in warmup)
    assert all(5 <= r.max_tokens <= 50 for r in requests)
    assert all(r.sampling.ignore_eos for r in requests)
    assert all(257 not in r.prompt_token_ids for r in requests)  # never the EOS token
    arrivals = [r.arrival_s for r in requests]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)


def test_sharegpt_sample_gives_dataset_prompts_and_output_lengths():
    tokenizer = ByteTokenizer()
    conversations = load_sharegpt(SHAREGPT_SAMPLE)
    assert len(conversations) >= 30
    scenario = chat_scenario(
        dataset=SHAREGPT_SAMPLE,
        prompt_tokens=LengthConfig(dist="dataset", min=4),
        output_tokens=LengthConfig(dist="dataset", min=4, max=300),
        num_requests=50,  # more than the sample: it cycles
    )
    prompts = {c.prompt: c for c in conversations}
    for request in Workload(scenario, tokenizer).requests():
        conversation = prompts[tokenizer.decode(request.prompt_token_ids)]
        assert request.max_tokens == min(300, len(tokenizer.encode(conversation.completion)))


def test_sharegpt_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"conversations": [{"from": "human", "value": "hi"}]}\n{"conversations": 3}\n')
    with pytest.raises(DataError, match="bad.jsonl line 2"):
        load_sharegpt(str(bad))
    with pytest.raises(ConfigError, match="file not found"):
        load_sharegpt(str(tmp_path / "missing.jsonl"))


@pytest.mark.parametrize("load", [load_sharegpt, load_trace])
def test_datasets_and_traces_name_a_line_that_is_not_json(tmp_path, load):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0}\n\n{"timestamp": 5,\n')
    with pytest.raises(DataError, match=r": .*bad\.jsonl line 3: not valid JSON \(Expecting"):
        load(str(bad))


def test_trace_replays_timestamps_lengths_and_shared_prefixes():
    rows = load_trace(TRACE_SAMPLE)
    scenario = ScenarioConfig(
        num_requests=None,
        arrival=ArrivalConfig(process="trace", trace_path=TRACE_SAMPLE, trace_speedup=2.0),
    )
    requests = list(Workload(scenario, ByteTokenizer()).requests())
    assert len(requests) == len(rows)
    first_s = rows[0].timestamp_s
    assert [r.arrival_s for r in requests] == pytest.approx(
        [(row.timestamp_s - first_s) / 2 for row in rows]
    )
    assert [len(r.prompt_token_ids) for r in requests] == [row.input_length for row in rows]
    assert [r.max_tokens for r in requests] == [row.output_length for row in rows]
    # two rows whose first hash ids agree share that many 512-token blocks of prompt
    a, b = next(
        (i, j)
        for i, j in itertools.combinations(range(len(rows)), 2)
        if rows[i].hash_ids[:1] == rows[j].hash_ids[:1]
        and min(rows[i].input_length, rows[j].input_length) > TRACE_BLOCK_TOKENS
    )
    block = slice(0, TRACE_BLOCK_TOKENS)
    assert requests[a].prompt_token_ids[block] == requests[b].prompt_token_ids[block]
    assert requests[0].prompt_token_ids[block] != requests[1].prompt_token_ids[block]


def test_a_repeated_hash_id_draws_its_block_once(tmp_path, monkeypatch):
    trace = tmp_path / "t.jsonl"
    rows = [([7], 600), ([3, 7], 1100), ([7, 3], 900)]
    trace.write_text(
        "".join(
            json.dumps({"timestamp": i, "input_length": n, "output_length": 2, "hash_ids": ids})
            + "\n"
            for i, (ids, n) in enumerate(rows)
        )
    )
    seeds = []
    default_rng = np.random.default_rng
    monkeypatch.setattr(
        np.random, "default_rng", lambda seed=None: seeds.append(seed) or default_rng(seed)
    )
    scenario = ScenarioConfig(
        num_requests=None, arrival=ArrivalConfig(process="trace", trace_path=str(trace))
    )
    workload = Workload(scenario, ByteTokenizer())
    first, second, third = (r.prompt_token_ids for r in workload.requests())
    assert [s for s in seeds if isinstance(s, list)] == [[0, 7], [0, 3]]
    block = slice(0, TRACE_BLOCK_TOKENS)
    next_block = slice(TRACE_BLOCK_TOKENS, 2 * TRACE_BLOCK_TOKENS)
    assert first[block] == second[next_block] == third[block]
    assert second[block][: 900 - TRACE_BLOCK_TOKENS] == third[next_block]
    assert first[block] == default_rng([0, 7]).choice(workload._token_pool, size=512).tolist()


def test_trace_csv(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,input_length,output_length\n0,10,3\n1500,20,4\n")
    rows = load_trace(str(trace))
    assert [(r.timestamp_s, r.input_length, r.output_length) for r in rows] == [
        (0.0, 10, 3),
        (1.5, 20, 4),
    ]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"timestamp": 5, "input_length": 5', "not valid JSON"),
        ('{"timestamp": 5, "input_length": 5}', "missing output_length"),
        ('{"timestamp": 5, "input_length": -5, "output_length": 3}', "lengths >= 1"),
        ('{"timestamp": 1, "input_length": 5, "output_length": 3}', "back in time"),
        ("[1, 2, 3]", "expected an object"),
    ],
)
def test_corrupt_trace_line_names_the_line(tmp_path, line, problem):
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        json.dumps({"timestamp": 2, "input_length": 5, "output_length": 3}) + "\n" + line + "\n"
    )
    with pytest.raises(DataError, match=f"t.jsonl line 2: .*{problem}"):
        load_trace(str(trace))


@pytest.mark.parametrize(
    ("build", "key"),
    [
        (lambda: ArrivalConfig(process="foo"), "process"),
        (lambda: ArrivalConfig(process="poisson", rate_rps=0), "rate_rps"),
        (lambda: ArrivalConfig(process="closed", concurrency=None), "concurrency"),
        (lambda: ArrivalConfig(process="trace"), "trace_path"),
        (lambda: LengthConfig(dist="uniform", min=10, max=5), "max"),
        (lambda: LengthConfig(dist="normal", mean=None, std=3), "mean"),
        (
            lambda: ScenarioConfig(arrival=ArrivalConfig(process="offline"), num_requests=None),
            "num_requests",
        ),
        (lambda: ScenarioConfig(prompt_tokens=LengthConfig(dist="dataset")), "dataset"),
    ],
)
def test_bad_scenario_values_raise_config_error_naming_the_field(build, key):
    with pytest.raises(ConfigError) as err:
        build()
    assert err.value.key == key
