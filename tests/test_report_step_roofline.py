"""The run report's per-step roofline section: each step kind's time against its own bound,
MBU and MFU against the probed ceilings where the profile has them, and the engine's path."""

from __future__ import annotations

import json
from html.parser import HTMLParser

from llmperf.report.run import build_run_report
from llmperf.report.step_roofline import step_roofline
from tests.test_report_support import write_realistic_run

# A bf16 run on a 2-core CPU: 4 prefill steps (6.36 s, bound 3.94 s) and 63 decode steps
# (7.05 s, bound 2.04 s), datasheet and probed ceilings.
PER_STEP = {
    "roofline_source": "steps",
    "step_count_prefill": 4, "step_time_prefill_s": 6.36,
    "step_count_decode": 63, "step_time_decode_s": 7.05,
    "step_count_mixed": 0, "step_time_mixed_s": 0.0,
    "roofline_bound_prefill_s": 3.18, "roofline_step_fraction_prefill": 0.5,
    "roofline_bound_decode_s": 1.41, "roofline_step_fraction_decode": 0.2,
    "roofline_bound_prefill_s_measured": 3.94, "roofline_step_fraction_prefill_measured": 3.94 / 6.36,
    "roofline_bound_decode_s_measured": 2.04, "roofline_step_fraction_decode_measured": 2.04 / 7.05,
    "mbu_prefill_measured": 0.01, "mfu_prefill_measured": 3.94 / 6.36,
    "mbu_decode_measured": 0.12, "mfu_decode_measured": 2.04 / 7.05,
    "mbu_decode": 0.08, "mfu_decode": 0.2,
}
ENGINE = {"name": "reference", "attention": "cpu", "fused_ops": True, "matmul_dtype": "bfloat16",
          "fast_path": "auto: attention cpu (the C++ decode kernel); fused ops on"}


class Cells(HTMLParser):
    """The text of every <td> of the table with class `step-roofline`, row by row."""

    def __init__(self, html: str):
        super().__init__()
        self.rows: list[list[str]] = []
        self._in_table = self._in_cell = False
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        if tag == "table" and dict(attrs).get("class") == "step-roofline":
            self._in_table = True
        elif self._in_table and tag == "tr":
            self.rows.append([])
        elif self._in_table and tag == "td":
            self._in_cell = True
            self.rows[-1].append("")

    def handle_endtag(self, tag):
        if tag == "table":
            self._in_table = False
        elif tag == "td":
            self._in_cell = False

    def handle_data(self, data):
        if self._in_cell:
            self.rows[-1][-1] += data


def test_rows_use_the_probed_ceilings_and_skip_kinds_without_steps():
    section = step_roofline(PER_STEP)
    assert section.peak == "probed"
    assert [r["phase"] for r in section.rows] == ["prefill", "decode"]  # no mixed steps
    decode = section.rows[1]
    assert decode == {"phase": "decode", "steps": "63", "time": "7.05 s", "mean_step": "112 ms",
                      "bound": "2.04 s", "fraction": "28.9 %", "mbu": "12.0 %", "mfu": "28.9 %"}
    assert section.rows[0]["fraction"] == "61.9 %" and section.rows[0]["bound"] == "3.94 s"


def test_without_a_probe_the_datasheet_ceilings_and_no_section_for_an_estimate():
    datasheet = {k: v for k, v in PER_STEP.items() if not k.endswith("_measured")}
    section = step_roofline(datasheet)
    assert section.peak == "datasheet"
    assert (section.rows[1]["bound"], section.rows[1]["fraction"], section.rows[1]["mbu"]) == ("1.41 s", "20.0 %", "8.00 %")
    assert section.rows[0]["mbu"] == "–"  # no datasheet MBU given for prefill
    assert step_roofline({**PER_STEP, "roofline_source": "estimate"}) is None
    assert step_roofline({"roofline_source": "steps"}) is None  # a summary from before these keys


def test_the_run_report_shows_each_step_kind_against_its_bound_and_the_engine_path(tmp_path):
    folder = write_realistic_run(tmp_path / "run")
    summary = json.loads((folder / "summary.json").read_text())
    summary.update(PER_STEP)
    summary["engine"] = {**summary["engine"], **ENGINE}
    (folder / "summary.json").write_text(json.dumps(summary))
    html = build_run_report(folder).read_text(encoding="utf-8")
    assert "<h2>Roofline per step kind</h2>" in html and "against the probed ceilings" in html
    assert ("Engine path: attention cpu, fused ops on, Linears in bfloat16"
            " (auto: attention cpu (the C++ decode kernel); fused ops on)") in html
    rows = [r for r in Cells(html).rows if r]
    assert rows == [["prefill", "4", "6.36 s", "1.59 s", "3.94 s", "61.9 %", "1.00 %", "61.9 %"],
                    ["decode", "63", "7.05 s", "112 ms", "2.04 s", "28.9 %", "12.0 %", "28.9 %"]]
    assert html.index("Roofline per step kind") < html.index("<h2>Plots</h2>")


def test_a_run_without_per_step_keys_has_no_section(tmp_path):
    html = build_run_report(write_realistic_run(tmp_path / "run")).read_text(encoding="utf-8")
    assert "Roofline per step kind" not in html
