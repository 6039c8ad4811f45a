"""One command compares three server families on one checkpoint folder:
`llmperf -m engine=openai engine.launch=vllm,llama.cpp,llmperf-serve model.path=DIR`. vLLM and
llama.cpp are tests/fake_server.py behind their families' default binaries (each fake records
the command line it got); llmperf-serve is the real one. llama.cpp gets the folder's GGUF,
written beside the weights (engines/launch/gguf_path.py); the others get the folder."""

from __future__ import annotations

import csv
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engines.launch.gguf_path import GGUFError, gguf_file, gguf_for

ROOT = Path(__file__).resolve().parent.parent
FAKE_SERVER = ROOT / "tests" / "fake_server.py"
FAKE_TPOT_S = {"vllm": 0.002, "llama.cpp": 0.008}

# records its command line, then serves on the host and port it names
WRAPPER = """#!{python}
import json, sys
argv = sys.argv[1:]
host, port = argv[argv.index("--host") + 1], argv[argv.index("--port") + 1]
with open({record!r}, "w") as out:
    json.dump(argv, out)
import os
os.execv(sys.executable, [sys.executable, {fake!r}, "--host", host, "--port", port,
                          "--tpot-s", "{tpot}"])
"""


def fake_binary(path: Path, record: Path, tpot: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(WRAPPER.format(python=sys.executable, record=str(record), fake=str(FAKE_SERVER), tpot=tpot))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ckpt") / "tiny-ckpt"
    subprocess.run([sys.executable, "-m", "llmperf.export", "model=tiny", f"out={out}"],
                   check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return out


def test_a_folder_gets_a_gguf_of_its_own_dtype_written_once(checkpoint, tmp_path):
    pytest.importorskip("gguf")
    import gguf
    from safetensors import safe_open

    first = gguf_for(str(checkpoint))
    assert first == str(checkpoint / "gguf" / "tiny-ckpt-f32.gguf") == str(gguf_file(checkpoint))
    written = Path(first).stat().st_mtime_ns
    time.sleep(0.01)
    assert gguf_for(str(checkpoint)) == first and Path(first).stat().st_mtime_ns == written
    reader = gguf.GGUFReader(first)
    arch = reader.fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() == "llama"
    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    with safe_open(str(checkpoint / "model.safetensors"), "pt") as weights:
        expected = weights.get_tensor("model.embed_tokens.weight").numpy()
    assert (embd.data.reshape(expected.shape) == expected).all()
    assert gguf_for("/a/file.gguf") == "/a/file.gguf" and gguf_for("tiny") == "tiny"
    bf16 = tmp_path / "bf16"
    bf16.mkdir()
    config = json.loads((checkpoint / "config.json").read_text())
    (bf16 / "config.json").write_text(json.dumps({**config, "torch_dtype": "bfloat16"}))
    assert gguf_file(bf16).name == "bf16-f16.gguf"
    (bf16 / "config.json").write_text(json.dumps({**config, "torch_dtype": "int4"}))
    with pytest.raises(GGUFError, match="torch_dtype 'int4' has no GGUF type here"):
        gguf_for(str(bf16))


def test_one_sweep_compares_vllm_llama_cpp_and_llmperf_serve(checkpoint, tmp_path):
    pytest.importorskip("gguf")
    records = {name: tmp_path / f"argv-{name}.json" for name in FAKE_TPOT_S}
    fake_binary(tmp_path / "venv" / "bin" / "vllm", records["vllm"], FAKE_TPOT_S["vllm"])
    fake_binary(tmp_path / "llama" / "src" / "build" / "bin" / "llama-server",
                records["llama.cpp"], FAKE_TPOT_S["llama.cpp"])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLMPERF_VLLM_VENV": str(tmp_path / "venv"),
           "LLMPERF_LLAMA_CPP_DIR": str(tmp_path / "llama")}
    sweep = tmp_path / "sweep"
    done = subprocess.run(
        [sys.executable, "-m", "llmperf", "-m", "engine=openai",
         "engine.launch=vllm,llama.cpp,llmperf-serve", f"model.path={checkpoint}",
         "scenario=closed", "scenario.arrival.concurrency=1,4", "scenario.num_requests=8",
         "scenario.warmup_requests=1", "scenario.prompt_tokens.dist=fixed",
         "scenario.prompt_tokens.value=64", "scenario.output_tokens.dist=fixed",
         "scenario.output_tokens.value=32", "scenario.validity.min_duration_s=0",
         "scenario.validity.min_completed=1", "engine.prompt_format=token_ids",
         "telemetry.enabled=false", "report.enabled=false", f"hydra.sweep.dir={sweep}",
         "hydra.sweep.subdir=${engine.launch.family}-c${scenario.arrival.concurrency}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    vllm_argv = json.loads(records["vllm"].read_text())
    assert vllm_argv[:2] == ["serve", str(checkpoint)]
    llama_argv = json.loads(records["llama.cpp"].read_text())
    assert llama_argv[llama_argv.index("-m") + 1] == str(checkpoint / "gguf" / "tiny-ckpt-f32.gguf")
    rows = list(csv.DictReader((sweep / "sweep.csv").open()))
    by_job = {(r["engine.launch.family"], int(r["scenario.arrival.concurrency"])): r for r in rows}
    assert sorted(by_job) == sorted((f, c) for f in ("vllm", "llama.cpp", "llmperf-serve")
                                    for c in (1, 4))
    for (family, _), row in by_job.items():
        # (not `valid`: its client checks read the machine's load as well as the run)
        assert row["num_completed"] == "8" and row["num_failed"] == "0", (family, row)
        summary = json.loads((sweep / row["job"] / "summary.json").read_text())
        assert summary["server"]["family"] == family
        assert summary["output_tokens_total"] == 8 * 32  # closed.yaml clips outputs to >= 32
    # each row measured its own server: the fakes' token gaps, 2 ms and 8 ms
    for c in (1, 4):
        fast, slow = (float(by_job[(f, c)]["tpot_p50_s"]) for f in ("vllm", "llama.cpp"))
        assert 0.002 <= fast < 0.006 <= 0.008 <= slow < 0.02, (c, fast, slow)
    page = subprocess.run([sys.executable, "-m", "llmperf.report", str(sweep)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert page.returncode == 0, page.stderr[-3000:]
    html = (sweep / "report.html").read_text()
    for family in ("vllm", "llama.cpp", "llmperf-serve"):  # a line and a table row per family
        assert f"family={family}" in html
    assert (sweep / "plots" / "sweep_load.png").is_file()


def test_a_folder_llama_cpp_cannot_serve_is_one_line_and_exit_2(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"torch_dtype": "int4"}))
    done = subprocess.run(
        [sys.executable, "-m", "llmperf", "engine=openai", "engine.launch=llama.cpp",
         f"engine.launch.binary={sys.executable}", f"model.path={folder}",
         f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
        text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "torch_dtype 'int4' has no GGUF type here" in lines[0], lines


def test_a_servers_cpu_seconds_count_every_process_of_its_session(tmp_path):
    """scripts/engines_compare.py's per-CPU-second figure: the session's CPU time from /proc,
    against what the processes measured of themselves (a worker child included)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from engines_compare import server_cpu_s

    burn = ("import sys, time\n"
            "end = time.process_time() + 0.4\n"
            "while time.process_time() < end: pass\n"
            "open(sys.argv[1], 'w').write(str(time.process_time()))\n"
            "time.sleep(30)\n")
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys\n"
         f"subprocess.Popen([sys.executable, '-c', {burn!r}, sys.argv[2]])\n"
         f"exec({burn!r})", str(tmp_path / "parent"), str(tmp_path / "child")],
        start_new_session=True)
    try:
        deadline = time.time() + 60
        while not all((tmp_path / n).is_file() and (tmp_path / n).read_text() for n in ("parent", "child")):
            assert time.time() < deadline, "the burners did not finish"
            time.sleep(0.05)
        own = sum(float((tmp_path / n).read_text()) for n in ("parent", "child"))
        measured = server_cpu_s(parent.pid)
        assert own * 0.9 - 0.05 <= measured <= own + 0.3, (own, measured)
    finally:
        os.killpg(parent.pid, 9)
        parent.wait()
