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
def side_trees(root: Path, base_commit: str, head_commit: str | None) -> Iterator[tuple[Path, Path]]:
    """The two sides' code as sibling worktrees of one temporary folder, `base` and `head`,
    removed (and pruned) on the way out, even on Ctrl-C. `head_commit` None: the working tree
    as it is, uncommitted and untracked (not ignored) files included, copied over a worktree
    of HEAD.

    Both sides run from trees made the same way: paths of one length, on one filesystem,
    neither with compiled bytecode of earlier runs. Run from the working tree itself, the head
    read 1-4% apart from its identical base (docs/gate.md, "Calibration"): its paths, and so
    every run's environment and the interpreter's memory layout, differ from the base's.
    """
    parent = Path(tempfile.mkdtemp(prefix="llmperf-gate-"))
    made: list[Path] = []
    try:
        for name, commit in (("base", base_commit), ("head", head_commit)):
            path = parent / name
            git(root, "worktree", "add", "--detach", "--quiet", str(path),
                commit or resolve_commit(root, "HEAD"))
            made.append(path)
        if head_commit is None:
            copy_changes(root, parent / "head")
        yield parent / "base", parent / "head"
    finally:
        for path in made:
            with contextlib.suppress(GateError):
                git(root, "worktree", "remove", "--force", str(path))
        shutil.rmtree(parent, ignore_errors=True)
        with contextlib.suppress(GateError):
            git(root, "worktree", "prune")


def copy_changes(root: Path, tree: Path) -> None:
    """Make `tree` (a worktree of HEAD) hold what `root`'s working tree holds: its modified and
    untracked, not ignored, files copied over, its deleted ones removed."""
    listed = git(root, "ls-files", "-z", "--modified", "--others", "--exclude-standard")
    for name in filter(None, listed.split("\0")):
        source, target = root / name, tree / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        elif not source.exists():
            target.unlink(missing_ok=True)
