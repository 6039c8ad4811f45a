"""Request shaping: engine.headers, engine.extra_body and the sampling options reach the
server (a scripted one keeps what it got), are sent only when set, leave today's chat body
byte for byte as it was, and bad values are one line and exit 2. A key given as
${oc.env:NAME} never lands in any file of the run folder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from llmperf.serve.app import build_app
from llmperf.serve.server import ServerThread, build_server
from tests.typed_api_helpers import Scripted, records_of, text_requests

ROOT = Path(__file__).resolve().parents[1]
CHAT_STREAM = (b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
               b'data: {"choices":[{"index":0,"delta":{"content":"!"},"finish_reason":"stop"}]}\n\n'
               b'data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2}}\n\n'
               b"data: [DONE]\n\n")


def sent(**options) -> tuple[dict[str, str], bytes]:
    scripted = Scripted(lambda body: CHAT_STREAM)
    with scripted.serve() as running:
        (record,) = records_of(running.base_url, text_requests(1), endpoint="chat", **options)
    assert record.error is None and record.output_tokens == 2
    _, headers, body = scripted.seen[0]
    return headers, body


def test_a_chat_body_without_images_or_options_is_byte_for_byte_todays():
    _, body = sent()
    assert body == (b'{"model":"m","max_tokens":8,"temperature":0.0,"top_p":1.0,"stream":true,'
                    b'"stream_options":{"include_usage":true},"ignore_eos":true,'
                    b'"messages":[{"role":"user","content":"hello there"}]}')


def test_headers_extra_body_and_sampling_options_reach_the_server():
    headers, raw = sent(headers={"X-Tenant": "acme", "Authorization": "Bearer from-header"},
                        extra_body={"chat_template_kwargs": {"enable_thinking": False}, "priority": 3},
                        top_p=0.9, top_k=40, min_tokens=2, stop=["\n\n"], seed=7,
                        presence_penalty=0.5, frequency_penalty=-0.25)
    body = orjson.loads(raw)
    assert headers["x-tenant"] == "acme"
    assert headers["authorization"] == "Bearer from-header"  # a header the user sets wins
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["priority"] == 3
    assert (body["top_p"], body["top_k"], body["min_tokens"], body["stop"], body["seed"]) == (
        0.9, 40, 2, ["\n\n"], 7)
    assert (body["presence_penalty"], body["frequency_penalty"]) == (0.5, -0.25)


def test_unset_sampling_options_are_not_sent():
    _, raw = sent(top_k=5)
    body = orjson.loads(raw)
    assert body["top_k"] == 5
    assert not {"min_tokens", "stop", "seed", "presence_penalty", "frequency_penalty"} & set(body)


def test_messages_send_stop_as_stop_sequences_and_top_p_only_when_set():
    scripted = Scripted(lambda body: b'data: {"type":"message_stop"}\n\n')
    with scripted.serve() as running:
        records_of(running.base_url, text_requests(1), endpoint="messages", stop=["END"])
        records_of(running.base_url, text_requests(1), endpoint="messages", top_p=0.5)
    first, second = (orjson.loads(raw) for _, _, raw in scripted.seen)
    assert first["stop_sequences"] == ["END"] and "stop" not in first and "top_p" not in first
    assert second["top_p"] == 0.5


def llmperf(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmperf", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


@pytest.mark.parametrize("override, words", [
    ("engine.endpoint=soap", "engine.endpoint='soap': unknown endpoint; valid: completions, chat"),
    ("+engine.headers.X-Tenant=5", "engine.headers.X-Tenant=5: a header's value must be a string"),
    ("+engine.extra_body.max_tokens=5", "engine.extra_body.max_tokens=5: llmperf sets this key itself"),
    ("+engine.extra_body.model=other", "engine.extra_body.model='other': llmperf sets this key itself"),
    ("scenario.images.format=gif", "scenario.images.format='gif': unknown image format"),
    ("scenario.images.count=1", "engine.endpoint chat, responses or messages"),
])
def test_bad_request_shaping_is_one_line_and_exit_2(override, words, tmp_path):
    done = llmperf("engine=openai", override, f"hydra.run.dir={tmp_path}")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in done.stderr


def test_a_secret_from_the_environment_reaches_the_server_but_no_file_of_the_run_folder(tmp_path):
    secret = "sk-live-0123456789abcdef"
    server = build_server({"model": "syn", "tpot_s": 0.001}, engine_name="synthetic", api_key=secret)
    run_dir = tmp_path / "run"
    with ServerThread(build_app(server)) as running:
        done = llmperf(
            "engine=openai", f"engine.base_url={running.base_url}", "engine.model=syn",
            "engine.endpoint=chat", "engine.api_key=${oc.env:LLMPERF_TEST_KEY}",
            "+engine.headers.X-Secret=${oc.env:LLMPERF_TEST_KEY}", "+engine.headers.X-Plain=visible",
            "engine.metrics_url=off", "scenario=offline", "scenario.num_requests=4",
            "scenario.warmup_requests=1", "scenario.output_tokens.value=4", "hardware=cpu",
            "telemetry.enabled=false", f"hydra.run.dir={run_dir}",
            env={"LLMPERF_TEST_KEY": secret},
        )
    assert done.returncode == 0, done.stderr
    assert secret not in done.stdout + done.stderr
    records = [orjson.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    assert len(records) == 5 and [r["error"] for r in records] == [None] * 5  # the key was right
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert {"config.yaml", "environment.json", "summary.json", "requests.jsonl"} <= {p.name for p in files}
    assert [p for p in files if secret.encode() in p.read_bytes()] == []
    config = (run_dir / "config.yaml").read_text()
    assert "api_key: '***'" in config and "X-Secret: '***'" in config and "X-Plain: '***'" in config


def test_a_literal_secret_on_the_command_line_is_masked_and_a_reference_kept():
    from llmperf.run.secrets import MASK, masked_argv

    argv = ["llmperf", "engine.api_key=sk-literal", "+engine.headers.X-Key=abc", "engine.api_key=EMPTY",
            "+engine.headers.X-Env=${oc.env:KEY}", "engine.model=m"]
    assert masked_argv(argv) == ["llmperf", f"engine.api_key={MASK}", f"+engine.headers.X-Key={MASK}",
                                 "engine.api_key=EMPTY", "+engine.headers.X-Env=${oc.env:KEY}", "engine.model=m"]
