"""docs/architecture.md against the tree: the packages it names, and imports going down its layers."""

from __future__ import annotations

import re

import pytest

from tests.test_import_graph import ROOT, import_graph, is_cli, module_files

DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")


def layer_table(doc: str = DOC) -> list[tuple[str, list[str]]]:
    """(layer, the paths its row names), from the top layer down."""
    section = doc.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]  # no header
    table = []
    for row in rows:
        layer, packages, _ = (cell.strip() for cell in row.strip("|").split("|", 2))
        table.append((layer, re.findall(r"`([\w/.]+)`", packages)))
    return table


def shared_paths(doc: str = DOC) -> list[str]:
    paragraph = doc.split("Shared by every layer", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"`([\w/]+\.py)`", paragraph)


def module_path(module: str) -> str:
    return module_files()[module].relative_to(ROOT).as_posix()


def owner_path(path: str, named: list[str]) -> str | None:
    """The longest named path that holds the file: itself, or a package folder above it."""
    holders = [n for n in named if path == n or (n.endswith("/") and path.startswith(n))]
    return max(holders, key=len, default=None)


def layers_of_modules() -> dict[str, int]:
    """Module -> its layer's index (0 is the top); shared modules are left out."""
    table = layer_table()
    layer_of_path = {path: i for i, (_, paths) in enumerate(table) for path in paths}
    shared = shared_paths()
    out = {}
    for module in module_files():
        path = module_path(module)
        if path in shared:
            continue
        if is_cli(module):
            out[module] = 0
            continue
        owner = owner_path(path, list(layer_of_path))
        assert owner is not None, f"{path} is in no layer of docs/architecture.md"
        out[module] = layer_of_path[owner]
    return out


def test_the_table_names_the_six_layers_top_down():
    assert [layer for layer, _ in layer_table()] == [
        "commands",
        "the run",
        "outputs",
        "the performance model",
        "the measurement",
        "the engines",
    ]
    assert shared_paths() == [
        "llmperf/__init__.py",
        "llmperf/errors.py",
        "llmperf/registry.py",
        "llmperf/options.py",
        "llmperf/paths.py",
        "llmperf/run/config.py",
    ]


def test_every_path_the_page_names_exists():
    named = [p for _, paths in layer_table() for p in paths] + shared_paths()
    for path in named:
        target = ROOT / path
        if path.endswith("/"):
            assert (target / "__init__.py").is_file(), f"{path}: no such package"
        else:
            assert target.is_file(), f"{path}: no such module"
    # and the paths in the prose and the diagram, e.g. `llmperf/measure/loadgen.py`
    for path in set(re.findall(r"(?<![\w/])((?:llmperf|engines)/[\w/]+(?:\.py|/))", DOC)):
        assert (ROOT / path).exists(), f"docs/architecture.md names {path}, which does not exist"


def test_every_package_of_llmperf_and_engines_is_in_the_table():
    named = {p for _, paths in layer_table() for p in paths}
    packages = sorted(
        init.parent.relative_to(ROOT).as_posix() + "/"
        for top in ("llmperf", "engines")
        for init in (ROOT / top).rglob("__init__.py")
    )
    # The root package holds only modules, each of which is named or is a command.
    missing = [p for p in packages if p not in named and p != "llmperf/"]
    assert not missing, f"packages docs/architecture.md does not name: {missing}"
    assert layers_of_modules()  # and every module falls in a layer (asserted inside)


def test_imports_go_down_the_layers():
    layers = layers_of_modules()
    names = [layer for layer, _ in layer_table()] + ["shared"]
    upward = [
        f"{module} ({names[layers[module]]}) -> {target} ({names[layers[target]]})"
        for module, targets in sorted(import_graph().items())
        if module in layers
        for target in sorted(targets)
        if target in layers and layers[target] < layers[module]
    ]
    assert not upward, "imports that go up a layer of docs/architecture.md:\n" + "\n".join(upward)


@pytest.mark.parametrize("where", ["layout", "link"])
def test_the_readme_links_the_architecture(where):
    if where == "link":
        assert "(docs/architecture.md)" in README
    else:
        layout = README.split("## Project layout", 1)[1].split("\n## ", 1)[0]
        assert "docs/architecture.md" in layout


def test_owner_path_takes_the_innermost_package():
    named = ["engines/", "engines/reference/", "llmperf/cli.py"]
    assert owner_path("engines/reference/engine.py", named) == "engines/reference/"
    assert owner_path("engines/hf.py", named) == "engines/"
    assert owner_path("llmperf/cli.py", named) == "llmperf/cli.py"
    assert owner_path("llmperf/other.py", named) is None
