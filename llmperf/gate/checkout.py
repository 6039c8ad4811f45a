"""Git for A/B mode: resolve a ref, tell a dirty tree, check a commit out in a temporary worktree."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from llmperf.gate.errors import GateError


def git(root: Path, *args: str) -> str:
    """stdout of `git -C root ARGS`; GateError with git's own first line when it fails."""
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                             timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GateError(f"git {' '.join(args)}: {e}") from None
    if out.returncode != 0:
        first = (out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}").splitlines()[0]
        raise GateError(f"git {' '.join(args)}: {first}")
    return out.stdout.strip()


def repo_root(path: Path) -> Path:
    try:
        return Path(git(path, "rev-parse", "--show-toplevel"))
    except GateError:
        raise GateError(f"{path} is not inside a git repository (A/B mode checks refs out)") from None


def resolve_commit(root: Path, ref: str) -> str:
    """The full commit id a ref names; GateError 'unknown git ref' otherwise."""
    if not ref or ref.startswith("-"):
        raise GateError(f"unknown git ref {ref!r}")
    try:
        return git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except GateError:
        raise GateError(f"unknown git ref {ref!r} in {root}") from None


def dirty_files(root: Path) -> list[str]:
    """Tracked files with uncommitted changes (untracked files do not count)."""
    status = git(root, "status", "--porcelain", "--untracked-files=no")
    return [line[3:] for line in status.splitlines() if line.strip()]


@contextlib.contextmanager
def worktree(root: Path, commit: str) -> Iterator[Path]:
    """A detached worktree of `commit`, removed (and pruned) on the way out, even on Ctrl-C."""
    parent = Path(tempfile.mkdtemp(prefix="llmperf-gate-"))
    path = parent / commit[:12]
    git(root, "worktree", "add", "--detach", "--quiet", str(path), commit)
    try:
        yield path
    finally:
        with contextlib.suppress(GateError):
            git(root, "worktree", "remove", "--force", str(path))
        shutil.rmtree(parent, ignore_errors=True)
        with contextlib.suppress(GateError):
            git(root, "worktree", "prune")
