"""The import graph of llmperf/ and engines/: no cycles, the CLI on top, no Hydra internals.

The graph is read from the source with `ast`, without importing anything, and holds every
import a module can make: at the top, inside functions, under `if TYPE_CHECKING:` (a
type-only cycle is still two modules that cannot be understood apart), and the lazy
"package.module:Name" strings the registries import by name.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("llmperf", "engines")
# "engines.reference.attention.eager:EagerAttention": imported by name when chosen.
LAZY_REFERENCE = re.compile(r"^((?:llmperf|engines)(?:\.\w+)*):\w+$")
FORBIDDEN_PREFIXES = ("hydra._internal",)


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages (a package is its __init__)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_names(module: str, path: Path) -> set[str]:
    """Every dotted name the module imports (absolute), from anywhere in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            names.add(source)
            # `from pkg import mod` imports the module pkg.mod when there is one
            names.update(f"{source}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = LAZY_REFERENCE.match(node.value)
            if match:
                names.add(match.group(1))
    return names


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the packages it imports."""
    files = module_files(root)

    def owner(name: str) -> str | None:  # the module that defines a dotted name
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in files.items():
        targets = {owner(name) for name in imported_names(module, path)}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path that returns to its start) per strongly connected component
    of more than one module, found with Tarjan's algorithm (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    return [_cycle_through(graph, component) for component in components]


def _cycle_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first)."""
    start = min(component)
    came_from = {start: None}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & component):
                if child == start:
                    path = [node]
                    while came_from[path[-1]] is not None:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle in component {sorted(component)}")


def is_cli(module: str) -> bool:
    """The command-line modules: llmperf.cli and each package's cli (and the __main__s that
    run them)."""
    last = module.rsplit(".", 1)[-1]
    return last in ("cli", "__main__")


# -- the checker on graphs drawn by hand ---------------------------------------------------


def test_find_cycles_on_graphs_drawn_by_hand():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert find_cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]
    # two separate cycles, one of them through three modules, and a module beside them
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "x": {"y"}, "y": {"x", "a"}}
    assert sorted(find_cycles(graph)) == [["a", "b", "c", "a"], ["x", "y", "x"]]


def test_the_graph_reads_every_kind_of_import(tmp_path):
    pkg = tmp_path / "llmperf"
    (pkg / "sub").mkdir(parents=True)
    (tmp_path / "engines").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "top.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from llmperf.sub.typed import T\n"
        "def later():\n    import llmperf.sub.inner\n"
        "from .sub import relative\n"
        "REGISTRY = {'x': 'llmperf.sub.lazy:Thing'}\n"
    )
    for name in ("typed", "inner", "relative", "lazy"):
        (pkg / "sub" / f"{name}.py").write_text("from .. import top\n" if name == "inner" else "")
    graph = import_graph(tmp_path)
    assert graph["llmperf.top"] == {
        "llmperf.sub",  # `from .sub import relative` runs the package first
        "llmperf.sub.typed",
        "llmperf.sub.inner",
        "llmperf.sub.relative",
        "llmperf.sub.lazy",
    }
    assert graph["llmperf.sub.inner"] == {"llmperf", "llmperf.top"}
    assert find_cycles(graph) == [["llmperf.sub.inner", "llmperf.top", "llmperf.sub.inner"]]


# -- the tree ------------------------------------------------------------------------------


def test_no_import_cycles_in_llmperf_and_engines():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_nothing_below_the_cli_imports_a_cli_module():
    graph = import_graph()
    assert {"llmperf.cli", "llmperf.gate.cli", "llmperf.report.cli"} <= set(graph)
    upward = [
        f"{module} -> {target}"
        for module, targets in sorted(graph.items())
        if not is_cli(module)
        for target in sorted(targets)
        if is_cli(target)
    ]
    assert not upward, "modules below the CLI import it:\n" + "\n".join(upward)


@pytest.mark.parametrize("forbidden", FORBIDDEN_PREFIXES)
def test_no_module_imports_hydra_internals(forbidden):
    offenders = []
    for module, path in module_files().items():
        names = {n for n in imported_names(module, path) if n.split(".")[:2] == forbidden.split(".")}
        # `from a.b import c` reads as a.b and a.b.c: name the module imported from
        offenders += [f"{module}: {n}" for n in sorted(names) if n.rpartition(".")[0] not in names]
    assert not offenders, f"{forbidden} is Hydra's private API:\n" + "\n".join(offenders)
