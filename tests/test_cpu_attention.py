"""`attention=cpu`: the C++ decode kernel that reads the paged KV cache in place, against
eager attention (an independent spelling-out in matmuls), through the engine against sdpa,
and its failure modes (a device it cannot run on, a kernel that cannot be built)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engines.reference import ReferenceEngine
from engines.reference.attention import get_backend
from engines.reference.cpu_info import cpu_flags
from engines.reference.kernels import cpu_ops
from llmperf.errors import ConfigError
from tests.test_decode_attention import paged_step

ROOT = Path(__file__).resolve().parents[1]
RAGGED = [([1] * 5, [1, 17, 160, 33, 64]), ([1, 12, 1, 1], [40, 12, 3, 129])]
TOLERANCE = {torch.float32: 2e-6, torch.bfloat16: 2e-2, torch.float16: 2e-3}


@pytest.fixture(scope="module")
def cpu_backend():
    return get_backend("cpu")


@pytest.mark.parametrize("heads", [(14, 2), (9, 3), (4, 4)], ids=["gqa7", "gqa3", "mha"])
@pytest.mark.parametrize("head_dim", [64, 128, 256, 48], ids=["d64", "d128", "d256", "d48-runtime-width"])
@pytest.mark.parametrize("query_lens,seq_lens", RAGGED, ids=["decode-only", "mixed"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_cpu_decode_matches_eager_on_ragged_paged_contexts(cpu_backend, heads, head_dim, query_lens, seq_lens, dtype):
    q, k_cache, v_cache, meta = paged_step(query_lens, seq_lens, *heads, dtype, head_dim=head_dim)
    scale = head_dim**-0.5
    before = cpu_backend.kernel_rows
    got = cpu_backend(q, k_cache, v_cache, meta, scale)
    want = get_backend("eager")(q, k_cache, v_cache, meta, scale)
    assert got.shape == want.shape and got.dtype == dtype
    torch.testing.assert_close(got.float(), want.float(), atol=TOLERANCE[dtype], rtol=0)
    # Decode rows went through the kernel (a lone decode row of a mixed step goes to sdpa with the prefill).
    decode_rows = sum(n == 1 for n in query_lens)
    assert cpu_backend.kernel_rows - before == (decode_rows if decode_rows > 1 or len(query_lens) == 1 else 0)


@pytest.mark.skipif("avx512_bf16" not in (cpu_flags() or []), reason="the bf16 kernel needs AVX512_BF16")
@pytest.mark.parametrize("heads,head_dim", [((9, 3), 64), ((14, 2), 64), ((4, 4), 128), ((8, 2), 256)],
                         ids=["gqa3-d64", "gqa7-d64", "mha-d128", "gqa4-d256"])
def test_bf16_decode_rounds_as_sdpa_does(cpu_backend, heads, head_dim):
    """On AVX512_BF16 the bf16 kernel (decode_bf16.cpp) rounds the softmax numerators to bf16
    before weighting the values, as SDPA's flash kernel does: its outputs equal SDPA's bitwise
    but for the fp32 sums' order (the fp32 kernel before it matched about 70% of them)."""
    q, k_cache, v_cache, meta = paged_step([1] * 6, [1, 17, 160, 33, 64, 129], *heads, torch.bfloat16,
                                           head_dim=head_dim)
    got = cpu_backend(q, k_cache, v_cache, meta, head_dim**-0.5)
    want = get_backend("sdpa")(q, k_cache, v_cache, meta, head_dim**-0.5)
    torch.testing.assert_close(got.float(), want.float(), atol=1e-2, rtol=torch.finfo(torch.bfloat16).eps)
    assert (got == want).float().mean().item() > 0.9


def test_a_head_dim_the_kernel_does_not_take_decodes_through_sdpa(cpu_backend):
    q, k_cache, v_cache, meta = paged_step([1] * 3, [5, 40, 17], 4, 2, torch.float32, head_dim=40)
    before = cpu_backend.kernel_rows
    got = cpu_backend(q, k_cache, v_cache, meta, 40**-0.5)
    want = get_backend("eager")(q, k_cache, v_cache, meta, 40**-0.5)
    torch.testing.assert_close(got, want, atol=2e-6, rtol=0)
    assert cpu_backend.kernel_rows == before


@pytest.mark.parametrize("kv_cache", ["paged", "contiguous"])
def test_engine_generates_sdpas_greedy_tokens_with_the_cpu_kernel(kv_cache):
    prompts = [[3 + (i * 7 + j) % 200 for j in range(5 + 23 * i)] for i in range(4)]
    kw = dict(model="tiny", precision="fp32", max_num_seqs=4, max_model_len=160, kv_cache=kv_cache)
    sdpa = ReferenceEngine(**kw, attention="sdpa", fused_ops=False)
    want = [o.token_ids for o in sdpa.generate(prompts, max_tokens=24, ignore_eos=True)]
    eng = ReferenceEngine(**kw, attention="cpu", fused_ops=False)
    got = [o.token_ids for o in eng.generate(prompts, max_tokens=24, ignore_eos=True)]
    assert got == want
    assert eng.backend.kernel_rows > 0
    assert eng.info()["cpu_ops_build_s"] >= 0


def test_attention_cpu_on_another_device_is_one_config_error():
    from engines.reference.options import ReferenceEngineConfig

    with pytest.raises(ConfigError, match="attention='cpu': runs on CPU only, not device=cuda"):
        ReferenceEngineConfig(attention="cpu", device="cuda")


def test_a_kernel_that_cannot_build_says_what_is_missing(monkeypatch, tmp_path):
    def no_compiler(*args, **kwargs):
        raise RuntimeError("Ninja is required to load C++ extensions\nmore detail")

    monkeypatch.setattr("torch.utils.cpp_extension.load", no_compiler)
    monkeypatch.setenv("LLMPERF_CACHE_DIR", str(tmp_path))
    with pytest.raises(ImportError, match=r"C\+\+ CPU operators .* could not be built \(Ninja is required"):
        cpu_ops.cpu_ops.__wrapped__()


def test_the_build_is_keyed_by_the_cpu_it_was_built_for(monkeypatch):
    native = cpu_ops._build_key()
    monkeypatch.setenv(cpu_ops.MARCH_ENV, "x86-64-v3")
    assert cpu_ops._build_key() != native
    assert "-march=x86-64-v3" in cpu_ops.cflags()


def test_checkouts_of_the_same_sources_share_one_build_and_leave_it_untouched(tmp_path, monkeypatch):
    """The gate's base and head worktrees hold the same kernel sources at other paths: one
    key, one build folder, sources copied there once, so ninja sees the same files."""
    kernels = Path(cpu_ops.__file__).with_name("cpu")
    builds, keys = [], []
    for checkout in ("base", "head"):
        copy = tmp_path / checkout / "cpu"
        shutil.copytree(kernels, copy)
        monkeypatch.setattr(cpu_ops, "SOURCES", [copy / s.name for s in cpu_ops.SOURCES])
        monkeypatch.setattr(cpu_ops, "HEADERS", [copy / h.name for h in cpu_ops.HEADERS])
        keys.append(cpu_ops._build_key())
        build_dir = tmp_path / "kernels" / keys[-1]
        before = {f.name: f.stat().st_mtime_ns for f in (build_dir / "src").glob("*")} \
            if build_dir.exists() else {}
        builds.append((cpu_ops.copied_sources(build_dir), before))
    assert keys[0] == keys[1]
    (base_paths, _), (head_paths, untouched) = builds
    assert base_paths == head_paths  # the head builds from the very files the base built from
    assert all(Path(p).read_bytes() == (kernels / Path(p).name).read_bytes() for p in head_paths)
    after = {f.name: f.stat().st_mtime_ns for f in (Path(head_paths[0]).parent).glob("*")}
    assert after == untouched and set(after) == {f.name for f in kernels.glob("*.[ch]*")}


PORTABLE_CHECK = """
import json, sys, torch
from engines.reference.attention import get_backend
from engines.reference.cpu_info import cpu_flags
from tests.test_decode_attention import paged_step
errors = []
lens = torch.randint(1, 200, (40,), generator=torch.Generator().manual_seed(0)).tolist()
for dtype in (torch.float32, torch.bfloat16):
    for head_dim in (64, 48):
        # 40 rows: a sequence a job (at most 10 threads), as well as (sequence, kv head) jobs below
        q, k, v, meta = paged_step([1] * 40, lens, 9, 3, dtype, head_dim=head_dim)
        got = get_backend("cpu")(q, k, v, meta, head_dim ** -0.5)
        want = get_backend("eager")(q, k, v, meta, head_dim ** -0.5)
        errors.append((got.float() - want.float()).abs().max().item())
        q, k, v, meta = paged_step([1] * 5, [1, 17, 160, 33, 64], 9, 3, dtype, head_dim=head_dim)
        got = get_backend("cpu")(q, k, v, meta, head_dim ** -0.5)
        want = get_backend("eager")(q, k, v, meta, head_dim ** -0.5)
        errors.append((got.float() - want.float()).abs().max().item())
print(json.dumps(errors))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.uname().machine != "x86_64", reason="x86-64 only")
def test_the_portable_build_without_avx512_matches_eager(tmp_path):
    """The kernel's other half: plain 16-float arrays where the CPU has no AVX-512. Built for
    x86-64-v3 (AVX2) in a child process: one process holds one build of the operator."""
    errors = portable_errors(PORTABLE_CHECK)
    assert len(errors) == 8
    assert max(errors[:4]) < 2e-6  # fp32
    assert max(errors[4:]) < 2e-2  # bf16


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("heads", [(14, 2), (9, 3)], ids=["gqa7", "gqa3"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_many_rows_go_a_sequence_a_job_and_still_match_eager(cpu_backend, threads, heads, dtype):
    """With at least 4 rows a thread, a job is a whole sequence (every kv head of each cached
    position read in one pass) instead of one (sequence, kv head) pair."""
    lens = torch.randint(1, 200, (48,), generator=torch.Generator().manual_seed(threads)).tolist()
    q, k_cache, v_cache, meta = paged_step([1] * 48, lens, *heads, dtype)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = cpu_backend(q, k_cache, v_cache, meta, 64**-0.5)
    finally:
        torch.set_num_threads(before)
    want = get_backend("eager")(q, k_cache, v_cache, meta, 64**-0.5)
    torch.testing.assert_close(got.float(), want.float(), atol=TOLERANCE[dtype], rtol=0)


def portable_errors(check: str) -> list[float]:
    """`check`, a script printing a JSON list of errors last, run in a child process whose
    C++ operators are built for x86-64-v3 (AVX2, no AVX-512): one process holds one build."""
    env = {**os.environ, cpu_ops.MARCH_ENV: "x86-64-v3", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", check], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
