"""`engine.cpu_huge_pages`: the weights and the KV cache in transparent huge pages where the
kernel allows it (engines/reference/huge_pages.py), read back from /proc/self/smaps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engines.reference import ReferenceEngine, huge_pages
from engines.reference.huge_pages import (
    huge_bytes,
    merge,
    resolve_huge_pages,
    thp_mode,
    weight_ranges,
)
from engines.reference.options import ReferenceEngineConfig
from llmperf.errors import ConfigError

MiB = 1 << 20
ROOT = Path(__file__).resolve().parents[1]
THP_ADVISABLE = thp_mode() in ("madvise", "always")
needs_thp = pytest.mark.skipif(not THP_ADVISABLE, reason=f"transparent huge pages are {thp_mode()} here")
PROMPTS = [[1, 5, 9, 13, 17, 21, 25, 29], [2, 4, 6, 8], [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]]


def _engine(choice: str) -> ReferenceEngine:
    # llama-107m's preset: ~210 MB of bf16 weights, a 64 MiB cache of 680 blocks.
    return ReferenceEngine(model="llama-107m", precision="bf16", num_kv_blocks=680, max_num_seqs=4,
                           max_model_len=256, cpu_huge_pages=choice)


# An engine that never asks, alone in a fresh interpreter: in a process where another engine
# advised its weights, glibc's heap (kept, engine.cpu_malloc=tuned) can hand the advised, huge
# pages to the next allocation, so "never asked" holds only where nothing else asked first.
# The control, 64 MiB written and never advised, tells a kernel that gives huge pages unasked.
UNADVISED = """
import json, torch
from engines.reference import ReferenceEngine
from engines.reference.huge_pages import huge_bytes, tensor_range
eng = ReferenceEngine(model="llama-107m", precision="bf16", num_kv_blocks=680, max_num_seqs=4,
                      max_model_len=256, cpu_huge_pages="false")
control = torch.ones(64 << 20, dtype=torch.uint8)
print(json.dumps({"choice": eng.info()["cpu_huge_pages"], "got": eng.info()["huge_page_bytes"],
                  "control": huge_bytes([tensor_range(control)])}))
"""


@needs_thp
def test_the_weights_and_the_kv_cache_lie_in_huge_pages_and_tokens_are_unchanged():
    off, on = _engine("false"), _engine("true")
    assert (on.info()["cpu_huge_pages"], off.info()["cpu_huge_pages"]) == ("true", "false")
    weight_bytes = sum(end - start for start, end in weight_ranges(on.model))
    cache_bytes = on.kv.storage.numel() * on.kv.storage.element_size()
    got = on.info()["huge_page_bytes"]
    assert got["weights"] >= 0.95 * weight_bytes
    assert got["kv_cache"] >= cache_bytes - 4 * MiB  # all but the partial 2 MiB at each end
    assert got["weights"] <= weight_bytes and got["kv_cache"] <= cache_bytes
    kwargs = dict(max_tokens=12, ignore_eos=True)
    assert on.generate(PROMPTS, **kwargs) == off.generate(PROMPTS, **kwargs)


@needs_thp
def test_an_engine_that_never_asks_gets_no_huge_pages_where_the_kernel_waits_to_be_asked():
    done = subprocess.run([sys.executable, "-c", UNADVISED], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    alone = json.loads(done.stdout.strip().splitlines()[-1])
    assert alone["choice"] == "false"
    if thp_mode() != "madvise" or alone["control"] > 4 * MiB:
        pytest.skip(f"this kernel gives huge pages unasked (THP {thp_mode()}, control {alone['control']} B)")
    assert alone["got"] == {"weights": 0, "kv_cache": 0}  # nothing in that process asked


def test_auto_follows_the_kernels_thp_mode(monkeypatch):
    for mode, chosen in (("madvise", "true"), ("always", "true"), ("never", "false"), (None, "false")):
        monkeypatch.setattr(huge_pages, "thp_mode", lambda mode=mode: mode)
        assert resolve_huge_pages("auto", "cpu") == chosen
    assert resolve_huge_pages("true", "cuda") == "false"
    assert resolve_huge_pages("false", "cpu") == "false"


def test_the_mode_of_2_mib_pages_is_the_per_size_setting_unless_it_inherits(tmp_path):
    def sysfs(top: str, per_size: str | None) -> None:
        (tmp_path / "enabled").write_text(top)
        (tmp_path / "hpage_pmd_size").write_text("2097152\n")
        if per_size is not None:
            (tmp_path / "hugepages-2048kB").mkdir(exist_ok=True)
            (tmp_path / "hugepages-2048kB" / "enabled").write_text(per_size)

    sysfs("always [madvise] never\n", None)  # a kernel before multi-size THP
    assert thp_mode(tmp_path) == "madvise"
    sysfs("always [madvise] never\n", "always [inherit] madvise never\n")
    assert thp_mode(tmp_path) == "madvise"
    sysfs("always [madvise] never\n", "[always] inherit madvise never\n")
    assert thp_mode(tmp_path) == "always"
    sysfs("[always] madvise never\n", "always inherit madvise [never]\n")
    assert thp_mode(tmp_path) == "never"
    assert thp_mode(tmp_path / "absent") is None


def test_huge_bytes_counts_each_mapping_at_most_its_overlap_with_the_ranges():
    smaps = (
        "7f0000000000-7f0000400000 rw-p 00000000 00:00 0\nAnonHugePages:      4096 kB\n"
        "7f0000400000-7f0000600000 rw-p 00000000 00:00 0\nAnonHugePages:         0 kB\n"
        "7f0000600000-7f0000a00000 rw-p 00000000 00:00 0\nAnonHugePages:      2048 kB\n"
        "7f0000a00000-7f0028a00000 rw-p 00000000 00:00 0\nAnonHugePages:    655360 kB\n"
    )
    # 1 MiB inside a mapping of 4 MiB all huge: that 1 MiB, not the mapping's 4
    assert huge_bytes([(0x7F0000100000, 0x7F0000200000)], smaps) == 1 * MiB
    # 1 MiB of the first mapping, 2 MiB of the small-page one, 1 MiB of the third (2 of its 4 huge)
    assert huge_bytes([(0x7F0000300000, 0x7F0000700000)], smaps) == 2 * MiB
    # none of the second, 2 of the third's 4 MiB, and the 2 MiB an advised 640 MiB neighbour took
    assert huge_bytes([(0x7F0000400000, 0x7F0000C00000)], smaps) == 2 * MiB + 2 * MiB
    assert huge_bytes([(0x7F0000400000, 0x7F0000600000), (0x7F0000A00000, 0x7F0000C00000)], smaps) == 2 * MiB
    assert huge_bytes([(0x7F0030000000, 0x7F0031000000)], smaps) == 0
    assert merge([(10, 20), (0, 5), (22, 30)], 3) == [(0, 5), (10, 30)]


def test_weight_ranges_cover_packed_weights():
    eng = ReferenceEngine(model="tiny", num_kv_blocks=8, cpu_huge_pages="false")
    ranges = weight_ranges(eng.model)
    total = sum(p.numel() * p.element_size() for p in eng.model.parameters() if not p.is_mkldnn)
    packed = [p for p in eng.model.parameters() if p.is_mkldnn]
    total += sum(torch.ops.mkldnn._nbytes(p) for p in packed)
    assert sum(end - start for start, end in ranges) >= total


def test_an_unknown_setting_is_one_clear_error():
    with pytest.raises(ConfigError, match="cpu_huge_pages"):
        ReferenceEngineConfig(cpu_huge_pages="sometimes")
    assert ReferenceEngineConfig(cpu_huge_pages=True).cpu_huge_pages == "true"
