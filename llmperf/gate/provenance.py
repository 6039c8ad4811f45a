"""Where figures were measured: commit, torch version, device model, thread count.

Read from a run's environment.json. Times are only comparable on the same device model with
the same thread count (and, less strictly, the same torch), so a baseline stores these facts
and the gate warns, one line per fact, when the current run's differ.
"""

from __future__ import annotations

from typing import Any

from llmperf.gate.runs import Job
from llmperf.measure.run_files import UnreadableFile, read_json

MACHINE_KEYS = ("device", "threads", "torch")  # a mismatch of these gets a warning


def machine_facts(job: Job) -> dict[str, Any]:
    """{git_commit, git_dirty, torch, device, threads} of one run; None where unknown."""
    try:  # a run folder without environment.json (another tool's, or cut short) has no facts
        env = read_json(job.path / "environment.json")
    except (UnreadableFile, OSError):
        env = {}
    env = env if isinstance(env, dict) else {}
    torch_facts = env.get("torch") or {}
    git = env.get("git") or {}
    gpus = torch_facts.get("devices") or []
    hardware = env.get("hardware") or {}
    device = ", ".join(gpus) if gpus else env.get("cpu_model") or hardware.get("device_name")
    return {
        "git_commit": git.get("commit") or job.summary.get("git_commit"),
        "git_dirty": git.get("dirty"),
        "torch": torch_facts.get("version"),
        "device": device,
        "threads": torch_facts.get("num_threads") or env.get("cpu_count"),
    }


def machine_mismatches(was: dict[str, Any], now: dict[str, Any]) -> list[str]:
    notes = []
    for key in MACHINE_KEYS:
        if was.get(key) is not None and now.get(key) is not None and was[key] != now[key]:
            notes.append(f"the baseline's {key} is {was[key]!r}, the current run's is"
                         f" {now[key]!r}: times are not comparable across machines")
    return notes


def describe(facts: dict[str, Any]) -> str:
    """commit 2eca81604ef6 (dirty), torch 2.13.0+cpu, Intel(R) Xeon(R), 2 threads."""
    parts = []
    if facts.get("git_commit"):
        dirty = " + uncommitted changes" if facts.get("git_dirty") else ""
        parts.append(f"commit {facts['git_commit'][:12]}{dirty}")
    if facts.get("torch"):
        parts.append(f"torch {facts['torch']}")
    if facts.get("device"):
        parts.append(str(facts["device"]))
    if facts.get("threads"):
        parts.append(f"{facts['threads']} thread{'s' if facts['threads'] != 1 else ''}")
    return ", ".join(parts) or "not recorded"
