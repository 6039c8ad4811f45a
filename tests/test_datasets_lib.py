"""Datasets through the `datasets` library (`scenario.dataset_format=table`, picked by `auto`):
parquet and jsonl files with a column mapping, ShareGPT conversations as sessions, a Hub
name read from the local cache offline, BurstGPT traces, and the one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hydra import initialize_config_module
from rich.console import Console

from llmperf.cli import CONFIG_MODULE
from llmperf.errors import ConfigError, UsageError
from llmperf.run.compose import compose_config
from llmperf.run.config import register_configs
from llmperf.run.runner import run_benchmark
from llmperf.workload.trace import load_trace

pytest.importorskip("datasets")

ROOT = Path(__file__).resolve().parents[1]
# The synthetic engine's tokenizer counts UTF-8 bytes: a text's token count is its length.
FAST = ["engine=synthetic", "engine.ttft_s=0.001", "engine.tpot_s=0.0002",
        "telemetry.enabled=false", "report.enabled=false", "hardware=cpu",
        "scenario.warmup_requests=0", "scenario.arrival.process=constant",
        "scenario.arrival.rate_rps=200", "scenario.validity.min_duration_s=0",
        "scenario.validity.min_completed=1"]
QUESTIONS = [("What is a KV cache?", 7), ("Explain paged attention briefly.", 12),
             ("Why does batching raise throughput?", 5), ("Name two schedulers.", 9)]


def run(tmp_path: Path, *overrides: str) -> list[dict]:
    register_configs()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        config = compose_config([*FAST, *overrides])
    run_dir = tmp_path / "run"
    run_benchmark(config, run_dir, console=Console(quiet=True))
    return [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]


def test_parquet_file_with_a_column_mapping_runs_end_to_end(tmp_path):
    data = tmp_path / "questions.parquet"
    pd.DataFrame({"question": [q for q, _ in QUESTIONS], "answer_tokens": [n for _, n in QUESTIONS],
                  "source": "made up"}).to_parquet(data)
    records = run(tmp_path, f"scenario.dataset={data}", "scenario.num_requests=8",
                  "scenario.dataset_columns.prompt=question",
                  "scenario.dataset_columns.output=answer_tokens",
                  "scenario.prompt_tokens.dist=dataset", "scenario.prompt_tokens.min=1",
                  "scenario.output_tokens.dist=dataset", "scenario.output_tokens.min=1")
    assert len(records) == 8 and all(r["error"] is None for r in records)
    expected = {len(q.encode()): n for q, n in QUESTIONS}  # prompt length -> output length
    for r in records:
        assert r["output_tokens"] == expected[r["input_tokens"]]
    # Each pass over the dataset sends every question once.
    assert sorted(r["input_tokens"] for r in records[:4]) == sorted(expected)


def test_jsonl_file_with_text_columns_takes_the_reply_length(tmp_path):
    data = tmp_path / "pairs.jsonl"
    pairs = [("Summarize: the cat sat.", "A cat sat."), ("Translate 'hola'.", "Hello."),
             ("Count to three.", "One, two, three.")]
    data.write_text("".join(json.dumps({"instruction": p, "response": a, "n": i}) + "\n"
                            for i, (p, a) in enumerate(pairs)))
    records = run(tmp_path, f"scenario.dataset={data}", "scenario.num_requests=6",
                  "scenario.dataset_columns.prompt=instruction",
                  "scenario.dataset_columns.output=response",
                  "scenario.prompt_tokens.dist=dataset", "scenario.prompt_tokens.min=1",
                  "scenario.output_tokens.dist=dataset", "scenario.output_tokens.min=1")
    expected = {len(p.encode()): len(a.encode()) for p, a in pairs}
    assert len(records) == 6
    assert {r["input_tokens"]: r["output_tokens"] for r in records} == expected


def sharegpt_rows() -> list[dict]:
    return [
        {"id": "a", "conversations": [
            {"from": "human", "value": "Hi, what is TTFT?"}, {"from": "gpt", "value": "Time to first token."},
            {"from": "human", "value": "And TPOT?"}, {"from": "gpt", "value": "Time per output token."},
            {"from": "human", "value": "Thanks"}, {"from": "gpt", "value": "Welcome."}]},
        {"id": "b", "conversations": [
            {"from": "system", "value": "be brief"},
            {"role": "user", "content": "Define goodput."}, {"role": "assistant", "content": "Requests/s meeting SLOs."},
            {"role": "user", "content": "Example?"}, {"role": "assistant", "content": "9 of 10 at 1 req/s."}]},
    ]


def test_sharegpt_conversations_run_as_sessions_turn_by_turn(tmp_path):
    data = tmp_path / "chats.parquet"
    rows = sharegpt_rows()
    # Parquet wants one message shape per column: the chat-format row goes through jsonl below.
    pd.DataFrame([rows[0]]).to_parquet(data)
    records = run(tmp_path, f"scenario.dataset={data}", "scenario.num_requests=6",
                  "scenario.sessions.turns=3", "scenario.sessions.think_time=fixed",
                  "scenario.sessions.think_time_s=0", "scenario.arrival.process=poisson",
                  "scenario.arrival.rate_rps=50",
                  "scenario.prompt_tokens.dist=dataset", "scenario.prompt_tokens.min=1",
                  "scenario.output_tokens.dist=dataset", "scenario.output_tokens.min=1")
    replies = [m["value"] for m in rows[0]["conversations"][1::2]]
    by_session: dict[str, list[dict]] = {}
    for r in records:
        by_session.setdefault(r["session_id"], []).append(r)
    assert len(by_session) == 2  # 6 turns = two sessions of the 3-turn conversation
    for turns in by_session.values():
        turns.sort(key=lambda r: r["turn"])
        assert [r["turn"] for r in turns] == [0, 1, 2]
        assert [r["output_tokens"] for r in turns] == [len(a.encode()) for a in replies]
        # Each turn resends the history: its prompt grows by the last reply and the new message.
        assert turns[0]["input_tokens"] < turns[1]["input_tokens"] < turns[2]["input_tokens"]


def test_chat_format_messages_become_the_same_exchanges(tmp_path):
    from llmperf.workload.datasets import DatasetColumns, load_conversations

    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in sharegpt_rows()))
    conversations = load_conversations(str(data), "table", DatasetColumns())
    assert conversations[1].exchanges == (("Define goodput.", "Requests/s meeting SLOs."),
                                         ("Example?", "9 of 10 at 1 req/s."))
    assert conversations[0].prompt == "Hi, what is TTFT?"
    assert len(conversations[0].exchanges) == 3


def test_a_missing_file_and_an_unknown_column_are_config_errors(tmp_path):
    from llmperf.workload.datasets import DatasetColumns, check_dataset, load_conversations

    with pytest.raises(ConfigError, match="file not found"):
        check_dataset(str(tmp_path / "nope.parquet"), "auto", DatasetColumns())
    data = tmp_path / "q.parquet"
    pd.DataFrame({"question": ["a b c"]}).to_parquet(data)
    with pytest.raises(ConfigError, match=r"dataset_columns.prompt='prompt_text': no such column"
                                          r".*valid: question"):
        load_conversations(str(data), "auto", DatasetColumns(prompt="prompt_text"))
    with pytest.raises(UsageError, match="no 'conversations' column; map one"):
        load_conversations(str(data), "auto", DatasetColumns())


def llmperf(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmperf", *FAST, *args], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                          capture_output=True, text=True, timeout=120)


def test_unknown_column_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"question": "hello"}) + "\n")
    result = llmperf(f"scenario.dataset={data}", "scenario.dataset_columns.prompt=prompt",
                     "scenario.prompt_tokens.dist=dataset", f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "dataset_columns.prompt='prompt': no such column" in result.stderr


def write_cached_hub_dataset(cache_dir: Path, name: str, source: Path) -> None:
    """What an online `load_dataset(name)` leaves in the datasets cache, made from a local
    file: <cache>/<name>/default/0.0.0/<hash>/ with the Arrow files and dataset_info.json."""
    from datasets.packaged_modules.parquet.parquet import Parquet

    builder = Parquet(data_files=str(source), dataset_name=name, hash="0123abcd",
                      cache_dir=str(cache_dir))
    builder.download_and_prepare()
    (config_dir,) = (cache_dir / name).iterdir()
    config_dir.rename(config_dir.with_name("default"))


def test_hub_name_reads_the_local_cache_offline_and_fails_in_one_line_when_absent(tmp_path):
    source = tmp_path / "q.parquet"
    pd.DataFrame({"question": [q for q, _ in QUESTIONS],
                  "answer_tokens": [n for _, n in QUESTIONS]}).to_parquet(source)
    cache = tmp_path / "hf-cache"
    write_cached_hub_dataset(cache, "llmperf_toy_questions", source)
    env = {"HF_DATASETS_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    common = ["scenario.num_requests=4", "scenario.dataset_columns.prompt=question",
              "scenario.dataset_columns.output=answer_tokens", "scenario.prompt_tokens.dist=dataset",
              "scenario.prompt_tokens.min=1", "scenario.output_tokens.dist=dataset",
              "scenario.output_tokens.min=1"]
    ok = llmperf("scenario.dataset=llmperf_toy_questions", *common,
                 f"hydra.run.dir={tmp_path / 'run'}", env=env)
    assert ok.returncode == 0, ok.stderr
    records = [json.loads(x) for x in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()]
    assert sorted(r["output_tokens"] for r in records) == sorted(n for _, n in QUESTIONS)
    missing = llmperf("scenario.dataset=someone/not-cached-anywhere", *common,
                      f"hydra.run.dir={tmp_path / 'run2'}", env=env)
    assert missing.returncode == 2
    assert len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    assert "not in the local datasets cache, and offline mode is on" in missing.stderr


def test_burstgpt_trace_reads_seconds_and_leaves_out_failed_requests(tmp_path):
    trace = tmp_path / "burstgpt.csv"
    trace.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                     "5,ChatGPT,472,18,490,Conversation log\n"
                     "45,ChatGPT,1087,0,1087,Conversation log\n"
                     "118.5,GPT-4,417,276,693,API log\n")
    rows = load_trace(str(trace))
    assert [(r.timestamp_s, r.input_length, r.output_length) for r in rows] == [
        (5.0, 472, 18), (118.5, 417, 276)]


def test_a_sharegpt_format_with_mapped_columns_is_refused():
    from llmperf.workload.datasets import DatasetColumns
    from llmperf.workload.scenario import ScenarioConfig

    with pytest.raises(ConfigError, match="no columns to map"):
        ScenarioConfig(dataset_format="sharegpt", dataset_columns=DatasetColumns(prompt="q"))
