"""The package's shape: layers import only downward, no import circles, SQL only in db/.

Read from the source with `ast`, so a change that breaks the shape fails
here before anyone has to notice it in review.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "coordinator"

# What each part of the package may import of the coordinator's own code.
# The SDK (client) speaks HTTP only, so it stands alone.
ALLOWED: dict[str, set[str]] = {
    "domain": {"domain"},
    "config": {"domain"},
    "metrics": {"domain"},
    # Log formats and the access log: the doors write their access lines with it.
    "logs": set(),
    "db": {"domain", "config", "db"},
    "core": {"domain", "config", "metrics", "db", "core"},
    # The RocketMQ gRPC door stands beside HTTP; the app's lifespan starts it
    # in the same process, so http may import it (lazily, when it is on).
    "grpc": {"domain", "config", "metrics", "logs", "core", "grpc"},
    # What the core holds, as JSON: the doors answer with these models and the
    # CLI's --json prints them, so they belong to neither.
    "views": {"domain", "views"},
    "http": {"domain", "config", "metrics", "logs", "core", "grpc", "views", "http"},
    "client": {"client"},
    "pipeline": {"domain", "config", "db", "client", "pipeline"},
    # The CLI works on the core directly and imports no door (see DOOR_STARTERS).
    "cli": {"domain", "config", "metrics", "logs", "db", "core", "views", "pipeline", "cli"},
}

# The doors through which clients reach the coordinator.
DOORS = {"http", "grpc"}
# The modules above the doors that may still import them, and why: `coordinator
# serve` starts the running node with its doors; every other command works on
# the core without one.
DOOR_STARTERS = {"coordinator.cli.serve"}

# Modules outside db/ that run statements no named query could hold, and why.
SQL_OUTSIDE_DB = {
    # The SDK's barrier runs in the producer's own database, on the producer's table.
    "coordinator.client.barrier",
    # Spark's reader wraps a named query (or the producer's table) in the
    # SELECT of one partition; the statement itself comes from db/.
    "coordinator.pipeline.source",
    # ... and the columnar reader the select list of that SELECT, with the
    # conversions of the types Arrow has none for.
    "coordinator.pipeline.columnar",
    # The audit checks the producer's own table before Spark reads it.
    "coordinator.pipeline.audit",
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """The coordinator modules `name` imports, wherever in the file (also in functions)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # `from package import module` imports the module, not (only) the package.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        else:
            continue
        yield from (t for t in targets if t in modules and t != name)


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: set(_imports(name, path, modules)) for name, path in modules.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "coordinator"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_in_a_circle() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def _allowed(module: str) -> set[str]:
    return ALLOWED[_layer(module)] | (DOORS if module in DOOR_STARTERS else set())


def test_layers_import_only_downward() -> None:
    wrong = [
        f"{module} imports {target}"
        for module, targets in sorted(_graph().items())
        # `python -m` entry points start the CLI, which sits on top of everything.
        if not module.endswith(".__main__")
        for target in sorted(targets)
        # The package itself holds only its version.
        if target != "coordinator" and _layer(target) not in _allowed(module)
    ]
    assert wrong == []


def test_the_door_starters_exist() -> None:
    # A starter renamed away would leave its exception behind, allowing nothing.
    assert DOOR_STARTERS - _modules().keys() == set()


def test_every_part_of_the_package_has_a_layer() -> None:
    parts = {_layer(module) for module in _modules()} - {"coordinator", "__main__"}
    assert parts <= ALLOWED.keys()


@pytest.mark.parametrize("layer", ["domain", "views"])
def test_the_vocabulary_does_no_io(layer: str) -> None:
    io_modules = {"psycopg", "psycopg_pool", "sqlalchemy", "fastapi", "starlette", "asyncio"}
    used = {
        f"{name}: {alias.name}"
        for name, path in _modules().items()
        if _layer(name) == layer
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
        if alias.name.split(".")[0] in io_modules
    }
    assert used == set()


def _execute_calls(path: Path) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in {"execute", "executemany"}
    ]


def test_sql_runs_only_through_the_named_query_layer() -> None:
    outside = {
        f"{name}:{line}"
        for name, path in _modules().items()
        if _layer(name) != "db" and name not in SQL_OUTSIDE_DB
        for line in _execute_calls(path)
    }
    assert outside == set()


def test_sql_text_lives_in_sql_files() -> None:
    # A string that starts like a statement (keywords in capitals, as our SQL
    # writes them) is SQL kept in Python.
    keywords = ("SELECT ", "INSERT ", "UPDATE ", "DELETE ", "WITH ", "CREATE ", "ALTER ", "DROP ")
    found = {
        f"{name}:{node.lineno}"
        for name, path in _modules().items()
        if name not in SQL_OUTSIDE_DB
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.lstrip().startswith(keywords)
    }
    assert found == set()
