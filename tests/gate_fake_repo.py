"""A throwaway git repository whose `python -m llmperf` writes a run folder in milliseconds.

Its decode steps take STEP_S x (1 + slowdown) x (1 + noise) seconds, where `slowdown` is
the commit's SLOWDOWN plus any `engine.inject_slowdown=F` override and noise is uniform in
+-NOISE; counters follow the commit's FORWARD_PASSES. Each run appends "<commit tag> <folder>"
to the file named by `order_log=...`, so a test can see which side ran when.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

MAIN = '''
import json, os, random, sys, time
from pathlib import Path
SLOWDOWN = {slowdown}
FORWARD_PASSES = {forward_passes}
STEP_S, NOISE = 0.010, {noise}
args = dict(a.split("=", 1) for a in sys.argv[1:])
slowdown = SLOWDOWN + float(args.get("engine.inject_slowdown", 0))
folder = Path(args["hydra.run.dir"])
time.sleep(float(args.get("sleep", 0)))
folder.mkdir(parents=True)
rng = random.Random()
steps = [{{"start_s": 1.0 + i * 0.01, "kind": "decode", "duration_s":
          STEP_S * (1 + slowdown) * (1 + rng.uniform(-NOISE, NOISE)), "num_seqs": 4,
          "num_prefill_tokens": 0, "num_decode_tokens": 4, "padded_tokens": 0,
          "kv_blocks_used": 8}} for i in range(FORWARD_PASSES)]
warmup = [dict(steps[0], start_s=0.1, duration_s=9.0)]  # before measure_start_s: left out
(folder / "steps.jsonl").write_text("".join(json.dumps(s) + "\\n" for s in warmup + steps))
step_s = sorted(s["duration_s"] for s in steps)[len(steps) // 2]
summary = {{"schema_version": 1, "valid": args.get("valid", "true") == "true",
           "validity": [{{"check": "min_completed", "ok": False, "detail": "3 < 32"}}],
           "interrupted": False, "measure_start_s": 0.5,
           "output_throughput_tps": 4 / step_s, "e2e_s": {{"median": step_s * 100}}}}
(folder / "summary.json").write_text(json.dumps(summary))
(folder / "environment.json").write_text(json.dumps({{"cpu_model": "Fake CPU",
    "torch": {{"version": "2.13.0+cpu", "num_threads": int(os.environ.get("OMP_NUM_THREADS", 2)),
              "devices": []}},
    "git": {{"commit": "{tag}", "dirty": False}}}}))
if "order_log" in args:
    with open(args["order_log"], "a") as f:
        f.write("{tag} " + folder.name + "\\n")
'''


def commit_version(repo: Path, tag: str, slowdown: float = 0.0, forward_passes: int = 40,
                   noise: float = 0.01) -> str:
    """Write llmperf/__main__.py for this version, commit it; the commit id."""
    package = repo / "llmperf"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(MAIN.format(slowdown=slowdown, forward_passes=forward_passes,
                                                     noise=noise, tag=tag))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", tag)
    return git(repo, "rev-parse", "HEAD")


def make_repo(repo: Path) -> Path:
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "ci@example.com")
    git(repo, "config", "user.name", "ci")
    return repo


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def order(log: Path) -> list[str]:
    return log.read_text().split()


def read(path: Path) -> dict:
    return json.loads(path.read_text())
