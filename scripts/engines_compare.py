"""scripts/engine_vs_vllm.py's third engine and its served comparison: llama.cpp offline (its
llama-server, every request queued at once by llmperf's closed loop at the slot count) and
the three engines each behind its own server (vllm serve, llama-server, llmperf-serve) under
the same closed-loop load at a few concurrencies. The servers are started once per precision
(engines.launch.server.ManagedServer, as `engine.launch` starts them) and stay up while the
rounds alternate between them; each round is one `llmperf engine=openai` run against one.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # engines/ sits beside llmperf/, as the runs' PYTHONPATH has it
    sys.path.insert(0, str(ROOT))

from engines.launch.options import LaunchOptions  # noqa: E402
from engines.launch.server import LaunchError, ManagedServer  # noqa: E402

ENGINES = ("reference", "vllm", "llama.cpp")
MODES = ("offline", "served")
GGUF_TYPE = {"bf16": "f16", "fp32": "f32"}  # llama.cpp's nearest to each precision
SLOT_CONTEXT = 256  # llama.cpp's positions per slot: 128 + 64, rounded up
SERVED_BY = {"reference": "llmperf-serve", "vllm": "vllm serve", "llama.cpp": "llama-server"}


def run(cmd: list[str], env: dict, log: Path) -> None:
    with log.open("w") as out:
        done = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"engine_vs_vllm: {shlex.join(cmd[:4])} ... failed ({done.returncode}); see {log}")


def label(variant: str) -> str:
    """A variant or engine as a file name part: paged/cpu -> paged-cpu, llama.cpp -> llamacpp
    (no dot, so that the run folder's .log sits beside it)."""
    return variant.replace("/", "-").replace("+", "-").replace(".", "")


def runs_text(values: list[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in values)


def cores() -> int:
    return len(os.sched_getaffinity(0))


def split_list(text: str, valid: tuple[str, ...], what: str) -> list[str]:
    items = [x for x in str(text).split(",") if x]
    bad = [x for x in items if x not in valid]
    if bad or not items:
        raise SystemExit(f"engine_vs_vllm: error: --{what} {text!r}: valid: {', '.join(valid)}")
    return items


def gguf(args, precision: str, work: Path) -> Path:
    """The checkpoint as llama.cpp's GGUF at the precision's type, written once."""
    out = work / f"{Path(args.checkpoint).resolve().name}-{GGUF_TYPE[precision]}.gguf"
    if not out.is_file() and not args.render_only:
        run([sys.executable, "-m", "llmperf.export", "format=gguf", f"type={GGUF_TYPE[precision]}",
             f"model.path={args.checkpoint}", f"out={out}"], os.environ.copy(), out.with_suffix(".log"))
    return out


def closed_loop(args, requests: int, concurrency: int, run_dir: Path, seed: int | None = None) -> list[str]:
    """llmperf's closed loop over INPUT_TOKENS in, OUTPUT_TOKENS out (fixed), ignore_eos. The
    run is judged valid on any duration and its own request count: these are short rounds.
    `seed`: the prompts' (a server kept up across runs must not see a run's prompts again)."""
    return [*([f"scenario.seed={seed}"] if seed is not None else []), "scenario=closed", f"scenario.arrival.concurrency={concurrency}", f"scenario.num_requests={requests}",
            "scenario.prompt_tokens.dist=fixed", f"scenario.prompt_tokens.value={args.input_tokens}",
            "scenario.prompt_tokens.min=1", "scenario.output_tokens.dist=fixed",
            f"scenario.output_tokens.value={args.output_tokens}", "scenario.output_tokens.min=1",
            "scenario.ignore_eos=true", "scenario.validity.min_duration_s=0",
            f"scenario.validity.min_completed={requests}", "telemetry.enabled=false", "report.enabled=false",
            f"hydra.run.dir={run_dir}"]


# llama-server closes some kept-alive connections after a streamed response without saying so;
# a request sent on one then fails unsent (at concurrency 1: 2 of 8 on llama-107m; on tiny, 3
# of 16 with aiohttp, 2 of 16 with httpx; none of 32 with Connection: close). A connection per
# request avoids it, at a local connect (well under a ms).
FRESH_CONNECTIONS = "engine.headers.Connection=close"


def client(args, precision: str, engine: str) -> list[str]:
    """The HTTP client's options: the checkpoint's tokenizer and shape, exact token-id prompts."""
    return ["engine=openai", f"engine.tokenizer={args.checkpoint}", f"engine.model_config={args.checkpoint}",
            f"engine.precision={precision}", "engine.prompt_format=token_ids",
            *([FRESH_CONNECTIONS] if engine == "llama.cpp" else [])]


def llama_args(args, slots: int) -> dict:
    return {"threads": args.llama_threads, "parallel": slots, "ctx_size": slots * SLOT_CONTEXT}


def llama_offline_command(args, precision: str, requests: int, gguf_file: Path, run_dir: Path) -> list[str]:
    """llama-server (llmperf starts it) with a slot per request; all requests sent at once."""
    launch = [f"engine.launch.args.{k}={v}" for k, v in llama_args(args, requests).items()]
    return [sys.executable, "-m", "llmperf", *client(args, precision, "llama.cpp"), "engine.launch=llama.cpp",
            f"model.path={gguf_file}", *launch, *closed_loop(args, requests, requests, run_dir)]


def summary(run_dir: Path) -> dict | None:
    path = run_dir / "summary.json"
    return json.loads(path.read_text()) if path.is_file() else None


# -- served ------------------------------------------------------------------------------------


def server_options(args, precision: str, engine: str, slots: int, kv_gib: float) -> LaunchOptions:
    """Each engine behind its own server at its best settings on this machine."""
    if engine == "vllm":
        return LaunchOptions(
            family="vllm", binary=args.vllm, ready_timeout_s=900,
            args={"dtype": {"bf16": "bfloat16", "fp32": "float32"}[precision], "max_model_len": 2048},
            env={"VLLM_CPU_OMP_THREADS_BIND": args.threads_bind, "VLLM_CPU_KVCACHE_SPACE": f"{kv_gib:g}"})
    if engine == "llama.cpp":
        return LaunchOptions(family="llama.cpp", args=llama_args(args, slots))
    return LaunchOptions(family="llmperf-serve", args={"engine": {"precision": precision}})


def start_servers(args, precision: str, engines: list[str], work: Path) -> dict[str, ManagedServer]:
    slots = max(concurrencies(args))
    servers: dict[str, ManagedServer] = {}
    try:
        for engine in engines:
            model = str(gguf(args, precision, work)) if engine == "llama.cpp" else args.checkpoint
            server = ManagedServer(server_options(args, precision, engine, slots, args.kv_cache_gib), model,
                                   work / f"served-{precision}-{label(engine)}-server.log")
            servers[engine] = server
            print(f"starting {server.family} for {precision}", flush=True)
            server.start()
            print(f"{server.family} {server.version} ready in {server.startup_s:.0f} s", flush=True)
    except LaunchError as err:
        for server in servers.values():
            server.stop()
        raise SystemExit(f"engine_vs_vllm: {err}") from None
    except BaseException:
        for server in servers.values():
            server.stop()
        raise
    return servers


def server_cpu_s(pid: int) -> float:
    """CPU seconds used so far by every process of the server's session (its workers too)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[3]) == pid:  # the session the server's start_new_session made
            total += int(fields[11]) + int(fields[12])
    return total / tick


def concurrencies(args) -> list[int]:
    return [int(c) for c in str(args.concurrencies).split(",")]


def served_requests(args, concurrency: int) -> int:
    return max(args.served_requests, 2 * concurrency)


def served_seed(round_: int, concurrency: int) -> int:
    """Each run's own prompts, the same for every engine: a server that kept a previous run's
    prompts (llama-server's slots, vLLM's prefix cache) would otherwise skip their prefill."""
    return 1000 * (round_ + 1) + concurrency


def served_command(args, precision: str, engine: str, base_url: str, model: str, concurrency: int,
                   run_dir: Path, seed: int | None = None) -> list[str]:
    return [sys.executable, "-m", "llmperf", *client(args, precision, engine), f"engine.base_url={base_url}",
            f"engine.model={model}", *closed_loop(args, served_requests(args, concurrency), concurrency, run_dir, seed)]


def measure_served(args, precision: str, engines: list[str], work: Path) -> list[dict] | None:
    """--repeats rounds, each every concurrency and every engine in turn: one row per (engine,
    concurrency) with every round's figures (None, after saying why, when results are missing)."""
    described = work / f"served-{precision}-servers.json"
    servers = {} if args.render_only else start_servers(args, precision, engines, work)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rows = {(e, c): {"engine": e, "precision": precision, "concurrency": c, "rounds": []}
            for c in concurrencies(args) for e in engines}
    try:
        if servers:
            described.write_text(json.dumps({e: s.describe() for e, s in servers.items()}, indent=1))
        for r in range(args.repeats):
            for c in concurrencies(args):
                for engine in engines:
                    run_dir = work / f"served-{precision}-{label(engine)}-c{c}-{r}"
                    if servers:
                        server = servers[engine]
                        before = server_cpu_s(server.pid)
                        run(served_command(args, precision, engine, server.base_url, server.served_model, c, run_dir,
                                           served_seed(r, c)),
                            env, run_dir.with_suffix(".log"))
                        (run_dir / "server_cpu.json").write_text(
                            json.dumps({"server_cpu_s": server_cpu_s(server.pid) - before}))
                    result = summary(run_dir)
                    if result is None:
                        print(f"engine_vs_vllm: error: no {run_dir}/summary.json (--render-only reads an earlier run's)")
                        return None
                    cpu = json.loads((run_dir / "server_cpu.json").read_text())["server_cpu_s"]
                    rows[(engine, c)]["rounds"].append(served_figures(result, cpu))
                print(f"served {precision} round {r + 1}, concurrency {c}: " + ", ".join(
                    f"{e} {rows[(e, c)]['rounds'][-1]['output_tps']:.1f} tok/s" for e in engines), flush=True)
    finally:
        for server in servers.values():
            server.stop()
    servers_seen = json.loads(described.read_text()) if described.is_file() else {}
    for row in rows.values():
        row["server"] = servers_seen.get(row["engine"], {})
        row["command"] = served_command(args, precision, row["engine"], "URL", row["server"].get("served_model", "MODEL"),
                                        row["concurrency"], Path("RUN_DIR"), served_seed(args.repeats - 1, row["concurrency"]))
    return list(rows.values())


def served_figures(result: dict, server_cpu: float) -> dict:
    tokens = result.get("output_tokens_total") or 0
    return {"ttft_p50_s": (result.get("ttft_s") or {}).get("median"),
            "tpot_p50_s": (result.get("tpot_s") or {}).get("median"),
            "output_tps": result["output_throughput_tps"], "valid": bool(result.get("valid")),
            "tokens_per_cpu_s": tokens / server_cpu if server_cpu > 0 else None}


# -- the page ----------------------------------------------------------------------------------


def median_of(rounds: list[dict], key: str) -> float | None:
    values = [x[key] for x in rounds if x.get(key) is not None]
    return statistics.median(values) if values else None


def offline_lines(args, rows) -> list[str]:
    """The three engines offline: each one's median output tok/s, per core and against vLLM."""
    n = cores()
    lines = ["## Three engines offline", "",
             f"{args.requests} requests of {args.input_tokens} tokens in and {args.output_tokens} out, all "
             f"queued at once, greedy, ignore_eos; the median of {args.repeats} alternating rounds (every round in "
             f"brackets); per core: ÷ {n}, the cores every engine was given.", "",
             "| precision | requests | engine | weights | output tok/s | tok/s per core | ÷ vLLM |",
             "|---|---|---|---|---|---|---|"]
    for precision, requests, vllm_runs, _, ours, llama in rows:
        vmed = statistics.median(vllm_runs)
        entries = [("vLLM `bench throughput`", precision, vllm_runs)]
        entries += [(f"reference, {variant}", precision, runs) for variant, runs, *_ in ours]
        if llama is not None:
            entries.append(("llama.cpp `llama-server`", f"GGUF {GGUF_TYPE[precision]}", llama[0]))
        for name, weights, runs in entries:
            med = statistics.median(runs)
            lines.append(f"| {precision} | {requests} | {name} | {weights} | {med:.1f} ({runs_text(runs)}) | "
                         f"{med / n:.1f} | {med / vmed:.2f} |")
    return lines


def served_by(row: dict) -> str:
    weights = f", GGUF {GGUF_TYPE[row['precision']]}" if row["engine"] == "llama.cpp" else ""
    return SERVED_BY[row["engine"]] + weights


def served_lines(args, served: list[dict]) -> list[str]:
    n = cores()
    lines = ["## Three engines served", "",
             "Each engine behind its own server, started once and kept up while the rounds alternate "
             f"between them; llmperf's closed loop (`engine=openai`, token-id prompts, {args.input_tokens} in, "
             f"{args.output_tokens} out, ignore_eos) at each concurrency, {args.served_requests} requests or twice "
             f"the concurrency, whichever is more, after 2 warmup requests; each run its own prompts (`scenario.seed` "
             "per round and concurrency, the same for every engine), as the servers stay up. Medians of {args.repeats} rounds; output "
             f"tok/s gives every round in brackets. Per core: ÷ {n}. Server tokens/CPU-s: output tokens ÷ the CPU "
             "seconds the server's processes used during the run (from /proc), what a core of its own would give. "
             "The client shares the 2 cores with the server.", "",
             "| precision | concurrency | engine (server) | TTFT p50 ms | TPOT p50 ms | output tok/s | tok/s per core "
             "| server tokens/CPU-s | valid |", "|---|---|---|---|---|---|---|---|---|"]
    for row in served:
        rounds = row["rounds"]
        out = median_of(rounds, "output_tps")
        per_cpu = median_of(rounds, "tokens_per_cpu_s")
        valid = sum(x["valid"] for x in rounds)
        lines.append(
            f"| {row['precision']} | {row['concurrency']} | {row['engine']} ({served_by(row)}) | "
            f"{median_of(rounds, 'ttft_p50_s') * 1e3:.1f} | {median_of(rounds, 'tpot_p50_s') * 1e3:.2f} | "
            f"{out:.1f} ({runs_text([x['output_tps'] for x in rounds])}) | {out / n:.1f} | "
            f"{'' if per_cpu is None else f'{per_cpu:.1f}'} | {valid}/{len(rounds)} |")
    lines += ["", "The servers (version, command line, environment, startup):", ""]
    seen = set()
    for row in served:
        server = row["server"]
        key = (row["precision"], row["engine"])
        if key in seen or not server:
            continue
        seen.add(key)
        env = " ".join(f"{k}={v}" for k, v in (server.get("env") or {}).items())
        lines.append(f"- {row['precision']}, {row['engine']}: {server.get('family')} {server.get('version')}, up in "
                     f"{server.get('startup_s') or 0:.0f} s: `{env + ' ' if env else ''}{shlex.join(server['command'])}`")
    return lines


def settings_lines(args) -> list[str]:
    return ["Each engine at its best thread settings on this machine: vLLM with "
            f"`VLLM_CPU_OMP_THREADS_BIND={args.threads_bind}` (its OpenMP threads on both cores; its default keeps "
            f"one core for the scheduler), llama.cpp with `-t {args.llama_threads}` and a slot per request in flight "
            f"(`--parallel`, {SLOT_CONTEXT} positions each: offline one per request, served the largest "
            "concurrency), the reference engine at its defaults (torch's thread pool, one thread per core; "
            "`attention=auto fused_ops=auto`) and, offline, each variant named. bf16 where the engine has it: "
            "vLLM `--dtype bfloat16`, the reference engine `engine.precision=bf16`; llama.cpp reads f16 GGUF "
            "(written by `llmperf-export format=gguf type=f16` from the same checkpoint; fp32 rows use f32). "
            "llama.cpp offline is its server fed by llmperf's closed loop at the slot count: only llama-server "
            "is built here (scripts/install-llama-cpp.sh), not its bench tools. The client opens a connection "
            "per request to llama-server (`engine.headers.Connection=close`): llama-server closes some kept-alive "
            "connections after a streamed response without saying so, and a request sent on one fails unsent "
            "(at concurrency 1, 2 of 8 on this checkpoint; with either HTTP transport, aiohttp or httpx)."]


def sweep_lines(args) -> list[str]:
    """The same comparison as one llmperf sweep, a server per job."""
    return ["## The same comparison from one command", "",
            "`engine.launch` starts each family's server on one checkpoint folder: vLLM and llmperf-serve load "
            "the folder, llama.cpp the folder's GGUF (`DIR/gguf/<name>-f32.gguf` for a float32 checkpoint, f16 "
            "for bf16 or fp16; written by llmperf-export's GGUF writer on first use, engines/launch/gguf_path.py). "
            "Each family runs at its defaults (vLLM binds its threads to every core; llama.cpp's 4 slots, so a "
            "concurrency above 4 queues in the server; llmperf-serve's reference engine at fp32, the "
            "checkpoint's dtype), a server per job; `llmperf-report` on the sweep folder then draws TTFT, TPOT "
            "and throughput against the concurrency, a line per family:", "",
            "```bash",
            f"llmperf -m engine=openai engine.launch=vllm,llama.cpp,llmperf-serve model.path={args.checkpoint} \\",
            "    engine.prompt_format=token_ids engine.headers.Connection=close scenario=closed \\",
            "    scenario.arrival.concurrency=1,4,16 \\",
            f"    scenario.num_requests=32 scenario.prompt_tokens.dist=fixed scenario.prompt_tokens.value={args.input_tokens} \\",
            f"    scenario.output_tokens.dist=fixed scenario.output_tokens.value={args.output_tokens} scenario.output_tokens.min=1 \\",
            "    'hydra.sweep.subdir=${engine.launch.family}-c${scenario.arrival.concurrency}'",
            "llmperf-report reports/sweeps/<timestamp>        # rebuild the comparison page",
            "```", "",
            "(`engine.headers.Connection=close`: a connection per request, as above, for llama-server. "
            "A subdir of the varying keys only: Hydra's default names each job's folder after all its "
            "overrides, which with the checkpoint's path can pass the 255-byte limit of a file name.) "
            "tests/test_three_engine_sweep.py runs this sweep against stand-in servers; "
            "tests/test_peer_three_engines.py (`-m peer`) against the real three."]
