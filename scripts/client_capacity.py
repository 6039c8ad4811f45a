"""How many requests per second the load generator itself holds, with 1 worker process and
with 2 (`scenario.client.workers`), side by side.

    python scripts/client_capacity.py                      # about 3-4 minutes
    python scripts/client_capacity.py --threshold-ms 1 --duration-s 4 --workers 1 2 4
    python scripts/client_capacity.py --engine http        # against llmperf-serve instead

By default each worker drives its own copy of the in-process synthetic engine (no model, no
concurrency limit: it answers after its latency options, here none, so the copies serve as
one would), and the load generator alone is measured. With `--engine http` it starts
`llmperf-serve engine=synthetic` in a process of its own and the workers reach it over
HTTP (`engine=openai`): the client's HTTP stack is then measured too, and on a small machine
the server shares its cores. For each worker count it searches the
highest constant request rate whose run keeps the client's dispatch lag p99 under the
threshold (1 ms) with no request failed and no saturation: double from --start-rps until a
trial misses, halve until one holds, then bisect (geometric midpoint) until the bracket is
within --tolerance. Each trial is a normal llmperf run (`engine=openai`) into a folder under
--output-dir. It prints each trial, then the capacities and their ratio (the issue's
acceptance: 2 workers hold at least 1.6x of 1).

Over HTTP the server shares the machine: on a small one its CPU, not the client's, may cap
both figures (the server's own request rate is printed with each trial to tell).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [sys.executable, "-m", "llmperf.serve", "engine=synthetic", f"port={port}",
         "served_model_name=synthetic"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"llmperf-serve exited: {server.stderr.read().decode()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.2)
    server.kill()
    sys.exit("llmperf-serve did not answer /health within 60 s")


def trial(args, base_url: str | None, workers: int, rate_rps: float, out: Path) -> dict:
    """One run at `rate_rps`; what it says of the client."""
    from hydra import compose, initialize_config_module
    from rich.console import Console

    from llmperf.run.config import load_config, register_configs
    from llmperf.run.runner import run_benchmark

    if base_url is None:
        engine = ["engine=synthetic"]
    else:
        engine = ["engine=openai", f"engine.base_url={base_url}", "engine.model=synthetic",
                  "engine.metrics_url=off"]
    overrides = [
        *engine, "scenario.arrival.process=constant",
        f"scenario.arrival.rate_rps={rate_rps:.3f}", "scenario.num_requests=null",
        f"scenario.duration_s={args.duration_s}", "scenario.warmup_requests=4",
        "scenario.prompt_tokens.dist=fixed", "scenario.prompt_tokens.value=16",
        "scenario.output_tokens.dist=fixed", f"scenario.output_tokens.value={args.output_tokens}",
        f"scenario.client.workers={workers}", "hardware=h100-sxm", "telemetry.enabled=false",
        "report.enabled=false",
    ]
    register_configs()
    with initialize_config_module(config_module="scenarios", version_base="1.3"):
        config = load_config(compose("config", overrides=overrides))
    run_benchmark(config, out, console=Console(file=io.StringIO()))
    s = json.loads((out / "summary.json").read_text())
    lag_ms = s["dispatch_lag_s"]["p99"] * 1e3
    held = lag_ms < args.threshold_ms and s["num_failed"] == 0 and not s["saturated"]
    return {"rate_rps": rate_rps, "held": held, "dispatch_lag_p99_ms": lag_ms,
            "loop_lag_p99_ms": (s["event_loop_lag_s"]["p99"] or 0.0) * 1e3,
            "served_rps": s["request_throughput_rps"], "failed": s["num_failed"],
            "saturated": s["saturated"]}


def capacity(args, base_url: str | None, workers: int) -> float:
    """The highest rate that held, by bracketing then bisection."""
    held, missed = None, None
    rate = args.start_rps
    for k in range(args.max_trials):
        out = args.output_dir / f"workers-{workers}" / f"trial-{k:02d}_rate-{rate:.0f}"
        t = trial(args, base_url, workers, rate, out)
        print(f"  workers={workers} rate={rate:8.1f} req/s  dispatch lag p99 "
              f"{t['dispatch_lag_p99_ms']:6.2f} ms  loop lag p99 {t['loop_lag_p99_ms']:6.2f} ms  "
              f"served {t['served_rps'] or 0:7.1f} req/s  failed {t['failed']}"
              f"{'  saturated' if t['saturated'] else ''}  -> {'held' if t['held'] else 'missed'}",
              flush=True)
        if t["held"]:
            held = rate
        else:
            missed = rate
        if held is not None and missed is not None and (missed - held) / missed <= args.tolerance:
            break
        if missed is None:
            rate *= 2
        elif held is None:
            rate /= 2
            if rate < 1:
                break
        else:
            rate = math.sqrt(held * missed)
    return held or 0.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--engine", choices=("synthetic", "http"), default="synthetic",
                        help="in-process synthetic copies per worker, or llmperf-serve over HTTP")
    parser.add_argument("--threshold-ms", type=float, default=1.0, help="dispatch lag p99 limit")
    parser.add_argument("--duration-s", type=float, default=3.0, help="each trial's measured window")
    parser.add_argument("--output-tokens", type=int, default=2)
    parser.add_argument("--start-rps", type=float, default=100.0)
    parser.add_argument("--tolerance", type=float, default=0.1)
    parser.add_argument("--max-trials", type=int, default=7)
    parser.add_argument("--output-dir", type=Path,
                        default=ROOT / "reports" / "client-capacity" / time.strftime("%Y%m%d-%H%M%S"))
    args = parser.parse_args(argv)
    if any(w < 1 for w in args.workers) or args.threshold_ms <= 0 or args.duration_s <= 0:
        parser.error("--workers must be >= 1, --threshold-ms and --duration-s > 0")
    server, base_url = None, None
    if args.engine == "http":
        port = free_port()
        server = start_server(port)
        base_url = f"http://127.0.0.1:{port}/v1"
    found = {}
    try:
        for workers in args.workers:
            print(f"workers={workers}: searching (dispatch lag p99 < {args.threshold_ms:g} ms)", flush=True)
            found[workers] = capacity(args, base_url, workers)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
    print(f"\nclient capacity at dispatch lag p99 < {args.threshold_ms:g} ms "
          f"({'synthetic engine over HTTP' if server else 'in-process synthetic engine, a copy per worker'},"
          f" {args.output_tokens} output tokens per request, {os.cpu_count()} cores):")
    base = found[args.workers[0]]
    for workers, rate in found.items():
        ratio = f"{rate / base:.2f}x" if base else "n/a"
        print(f"  {workers} worker{'s' if workers > 1 else ' '}  {rate:8.1f} req/s   {ratio} of {args.workers[0]}")
    (args.output_dir / "capacity.json").write_text(json.dumps(
        {"threshold_ms": args.threshold_ms, "capacity_rps": {str(k): v for k, v in found.items()}}, indent=2))


if __name__ == "__main__":
    main()
