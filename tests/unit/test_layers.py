"""The package's layers: every import points down, and no module imports itself back.

The map is ``docs/explanation/architecture.md``. Imports are read from the source with :mod:`ast`
(top-level, ``TYPE_CHECKING`` and function-level alike), so a lazy import cannot hide
an upward dependency or a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "sqlq_orm"

LAYERS: dict[str, int] = {
    "sqlq_orm.errors": 0,
    "sqlq_orm.schema": 1,
    "sqlq_orm.core": 2,
    "sqlq_orm.db": 3,
    "sqlq_orm.migrations": 4,
    "sqlq_orm.migrate": 4,
    "sqlq_orm.ops": 4,
    "sqlq_orm.queue": 5,
    "sqlq_orm.scheduler": 6,
    "sqlq_orm.worker": 6,
    "sqlq_orm.tasks": 6,  # beside the worker: a task is a handler to it (tasks -> worker only)
    "sqlq_orm.cli": 7,
    "sqlq_orm.testing": 7,  # the testing kit, beside the CLI: nothing imports it
    "sqlq_orm.dashboard": 7,
    "sqlq_orm.__main__": 8,
    "sqlq_orm": 8,  # the package's __init__: the public surface re-exports every layer
}
"""Rank of each part of the package; a module may import only parts of equal or lower rank."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_ROOT.rglob("*.py"))}


def layer_of(module: str) -> str:
    """The longest entry of LAYERS that is ``module`` or a package containing it."""
    candidates = [name for name in LAYERS if module == name or module.startswith(name + ".")]
    if not candidates:
        raise AssertionError(f"{module} is in no layer: add its package to LAYERS")
    return max(candidates, key=len)


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The sqlq_orm modules ``module`` imports (a name imported from a package counts
    as the submodule when there is one)."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in known else base)
    return {name for name in found if name == "sqlq_orm" or name.startswith("sqlq_orm.")}


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    known = set(modules)
    return {name: imports_of(name, path, known) - {name} for name, path in modules.items()}


def test_every_module_belongs_to_a_layer():
    for module in all_modules():
        layer_of(module)


def test_imports_point_down_the_layers():
    upward = []
    for module, imported in import_graph().items():
        rank = LAYERS[layer_of(module)]
        for target in sorted(imported):
            if LAYERS[layer_of(target)] > rank:
                upward.append(f"{module} (layer {layer_of(module)}) imports {target}")
    assert upward == [], "upward imports:\n" + "\n".join(upward)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle in ``graph`` (as a path that ends where it starts), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycles():
    graph = import_graph()
    # A package's __init__ that re-exports its own submodules is not a cycle the
    # interpreter can trip on unless a submodule imports the package back; keep the
    # edges from submodule to package and drop package -> own submodule re-exports.
    for module, imported in graph.items():
        graph[module] = {t for t in imported if not t.startswith(module + ".")}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
    ],
)
def test_the_cycle_finder_finds_cycles_and_only_cycles(graph, expected):
    assert find_cycle(graph) == expected


def test_an_upward_import_is_caught(tmp_path):
    source = tmp_path / "sqlq_orm" / "db" / "bad.py"
    source.parent.mkdir(parents=True)
    source.write_text("from sqlq_orm.worker.runtime import Worker\n")
    imported = imports_of("sqlq_orm.db.bad", source, {"sqlq_orm.worker.runtime"})
    assert imported == {"sqlq_orm.worker.runtime"}
    assert LAYERS[layer_of("sqlq_orm.worker.runtime")] > LAYERS[layer_of("sqlq_orm.db.bad")]


def test_only_the_cli_imports_the_dashboard_and_the_dashboard_not_the_cli():
    # The dashboard's dependencies are an optional extra: nothing the core needs may
    # import it, and the CLI imports it only inside its command.
    wrong = []
    for module, imported in import_graph().items():
        in_dashboard = layer_of(module) == "sqlq_orm.dashboard"
        for target in imported:
            if layer_of(target) == "sqlq_orm.dashboard" and not (
                in_dashboard or layer_of(module) == "sqlq_orm.cli"
            ):
                wrong.append(f"{module} imports {target}")
            if in_dashboard and layer_of(target) == "sqlq_orm.cli":
                wrong.append(f"{module} imports {target}")
    assert wrong == []


def test_nothing_imports_the_testing_kit_and_only_its_plugin_imports_pytest():
    # The testing kit is a user-facing room at the top (beside the CLI): nothing in the
    # package, the public surface included, imports it, and pytest is imported only by
    # its plugin module (the rest works under any test runner).
    wrong = []
    for module, imported in import_graph().items():
        if layer_of(module) != "sqlq_orm.testing":
            kit = [t for t in imported if layer_of(t) == "sqlq_orm.testing"]
            wrong += [f"{module} imports {target}" for target in kit]
    assert wrong == []
    for module, path in all_modules().items():
        if layer_of(module) == "sqlq_orm.testing" and module != "sqlq_orm.testing.pytest_plugin":
            assert "import pytest" not in path.read_text(), module
