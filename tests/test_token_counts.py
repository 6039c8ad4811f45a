"""Where a run's token counts come from is recorded, and bytes counted as tokens are never
shown without a warning (console and report)."""

from __future__ import annotations

import io
import json

from rich.console import Console

from llmperf.measure.metrics import compute_metrics
from llmperf.report.run import build_run_report
from llmperf.run.config import SloConfig
from llmperf.run.console import print_summary
from tests.fakes import record
from tests.test_report_support import write_realistic_run


def with_source(rec, source):
    rec.token_count_source = source
    return rec


def test_summary_records_the_least_exact_token_count_source():
    records = [with_source(record("a", 0.0, [0.1, 0.2]), "server usage"),
               with_source(record("b", 0.0, [0.1, 0.3]), "bytes"),
               with_source(record("c", 0.0, [0.2]), "server usage"),
               record("d", 0.0, [0.1], error="boom")]  # failed: its counts are not used
    figures = compute_metrics(records, SloConfig())
    assert figures["token_count_source"] == "bytes"
    assert figures["token_count_sources"] == {"server usage": 2, "bytes": 1}
    only_usage = compute_metrics(records[:1], SloConfig())
    assert only_usage["token_count_source"] == "server usage"
    assert compute_metrics([], SloConfig())["token_count_source"] is None


def console_text(summary) -> str:
    out = io.StringIO()
    print_summary(summary, "run", Console(file=out, width=200))
    return out.getvalue()


def test_console_warns_when_bytes_were_counted_as_tokens():
    records = [with_source(record(str(i), 0.0, [0.1, 0.2]), "bytes") for i in range(3)]
    summary = {**compute_metrics(records, SloConfig()), "scenario": {"name": "chat"},
               "engine": {"name": "openai"}, "model": {"name": "m"}, "valid": True,
               "validity": []}
    text = console_text(summary)
    assert "warning: token counts of 3 requests are UTF-8 bytes, not the model's tokens" in text
    summary["token_count_source"] = "server usage"
    assert "warning" not in console_text(summary)


def test_report_warns_when_bytes_were_counted_as_tokens(tmp_path):
    folder = write_realistic_run(tmp_path / "run", steps=False, telemetry=False)
    summary = json.loads((folder / "summary.json").read_text())
    summary |= {"token_count_source": "bytes", "token_count_sources": {"bytes": 59}}
    (folder / "summary.json").write_text(json.dumps(summary))
    html = build_run_report(folder).read_text()
    assert "TOKENS ARE BYTES" in html
    assert "token counts of 59 requests are UTF-8 bytes" in html
