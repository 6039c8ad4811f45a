"""Speculative decoding from vLLM's /metrics: the acceptance rate and the mean accepted length
over the measured window, from the counters' differences between its first and last scrape."""

from __future__ import annotations

from llmperf.serverside.scraper import parse_rows
from llmperf.serverside.window import window_summary


def vllm_text(drafts: int, draft_tokens: int, accepted: int, generated: int) -> str:
    """vLLM's exposition of the spec-decode counters (per engine, `_total` on each)."""
    lines = []
    for name, value in (("spec_decode_num_drafts", drafts), ("spec_decode_num_draft_tokens", draft_tokens),
                        ("spec_decode_num_accepted_tokens", accepted), ("generation_tokens", generated)):
        lines += [f"# HELP vllm:{name} counter", f"# TYPE vllm:{name} counter",
                  f'vllm:{name}_total{{engine="0",model_name="m"}} {value}.0']
    return "\n".join(lines) + "\n"


def test_acceptance_rate_and_mean_accepted_length_over_the_window_only():
    # before the window: 100 drafts of 3 tokens, 150 accepted; over it: 60 drafts (180 draft
    # tokens), 108 accepted -> 108/180 = 0.6 accepted, 1 + 108/60 = 2.8 tokens per step
    family, before = parse_rows(vllm_text(100, 300, 150, 400), t_s=1.0)
    _, after = parse_rows(vllm_text(160, 480, 258, 568), t_s=5.0, family=family)
    out = window_summary(before + after, start_s=1.0, end_s=5.0)
    assert family.name == "vllm"
    assert (out["server_spec_decode_drafts"], out["server_spec_decode_draft_tokens"],
            out["server_spec_decode_accepted_tokens"]) == (60, 180, 108)
    assert out["server_spec_decode_acceptance_rate"] == 108 / 180
    assert out["server_spec_decode_mean_accepted_length"] == 1 + 108 / 60
    assert out["server_output_tokens"] == 168  # = 60 steps x 2.8 tokens


def test_without_drafts_there_are_no_spec_decode_figures():
    family, before = parse_rows(vllm_text(0, 0, 0, 10), t_s=1.0)
    _, after = parse_rows(vllm_text(0, 0, 0, 30), t_s=2.0, family=family)
    out = window_summary(before + after, start_s=1.0, end_s=2.0)
    assert "server_spec_decode_acceptance_rate" not in out
    assert "server_spec_decode_mean_accepted_length" not in out
