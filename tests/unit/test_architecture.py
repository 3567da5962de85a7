"""The package's shape: layers import only downward, no import circles, SQL only in db/.

The Alembic environment (the top-level migrations/, coordinator.migrations in
a wheel) is held to the same rules as the package.

Read from the source with `ast`, so a change that breaks the shape fails
here before anyone has to notice it in review.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "coordinator"
# Each source directory and the package its modules are imported as.
SOURCES = {PACKAGE: "coordinator", REPO / "migrations": "coordinator.migrations"}

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
    # The doors are peers: each takes the core, none imports another. Neither
    # reads `Settings` (config): each reads its own config, which
    # core/configs.py builds with the services' (`core.configs.http`).
    "grpc": {"domain", "metrics", "logs", "core", "grpc"},
    "http": {"domain", "metrics", "logs", "core", "views", "http"},
    # What the core holds, as JSON: the doors answer with these models and the
    # CLI's --json prints them, so they belong to neither.
    "views": {"domain", "views"},
    # A running node: the core, then each configured door.
    "node": {"domain", "config", "metrics", "logs", "core", "http", "grpc", "node"},
    "client": {"client"},
    "pipeline": {"domain", "config", "db", "client", "pipeline"},
    # The schema and its SQL come from db/; plain `alembic` without a URL
    # finds the database from the settings, like `coordinator serve`.
    "migrations": {"domain", "config", "db", "migrations"},
    # The CLI works on the core directly; `serve` starts a node, which
    # starts the doors: no command imports a door.
    "cli": {
        "domain",
        "config",
        "metrics",
        "logs",
        "db",
        "core",
        "views",
        "node",
        "pipeline",
        "cli",
    },
}

# The doors through which clients reach the coordinator.
DOORS = {"http", "grpc"}

# Modules outside db/ that run statements no named query could hold, and why.
SQL_OUTSIDE_DB = {
    # The SDK's barrier runs in the producer's own database, on the producer's table.
    "coordinator.client.barrier",
    # ... and its inbox in the consumer's own database, on the consumer's table,
    # both through the SDK's runner for the user's psycopg or SQLAlchemy handles.
    "coordinator.client.inbox",
    "coordinator.client._databases",
    # Spark's reader wraps a named query (or the producer's table) in the
    # SELECT of one partition; the statement itself comes from db/.
    "coordinator.pipeline.source",
    # ... and the columnar reader the select list of that SELECT, with the
    # conversions of the types Arrow has none for.
    "coordinator.pipeline.columnar",
    # The audit checks the producer's own table before Spark reads it.
    "coordinator.pipeline.audit",
}


def _module_name(path: Path, source: Path, package: str) -> str:
    parts = (package, *path.relative_to(source).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(path, source, package): path
        for source, package in SOURCES.items()
        for path in source.rglob("*.py")
    }


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


def test_layers_import_only_downward() -> None:
    wrong = [
        f"{module} imports {target}"
        for module, targets in sorted(_graph().items())
        # `python -m` entry points start the CLI, which sits on top of everything.
        if not module.endswith(".__main__")
        for target in sorted(targets)
        # The package itself holds only its version.
        if target != "coordinator" and _layer(target) not in ALLOWED[_layer(module)]
    ]
    assert wrong == []


def test_the_doors_are_peers_that_only_the_node_starts() -> None:
    # A door imports no other door, and no part of the package but the
    # running node imports a door: adding one is a module and a line in
    # coordinator/node/doors.py.
    importers = {
        f"{layer} may import {door}"
        for layer, allowed in ALLOWED.items()
        for door in DOORS & allowed
        if layer not in {door, "node"}
    }
    assert importers == set()
    wrong = {
        f"{module} imports {target}"
        for module, targets in _graph().items()
        if _layer(module) != "node"
        for target in targets
        if _layer(target) in DOORS and _layer(target) != _layer(module)
    }
    assert wrong == set()


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


def test_the_alembic_environment_is_held_to_the_rules() -> None:
    graph = _graph()
    assert "coordinator.db.schema" in graph["coordinator.migrations.env"]
    assert "coordinator.db.migration_sql" in graph["coordinator.migrations.versions.0001_messages"]


REPOSITORY = PACKAGE.parent

# What examples/ may import of the coordinator: the SDK, and the embedded
# PostgreSQL that gives the orders example a database of its own when none is
# named (a convenience of the demo, not something a user's service needs).
EXAMPLES_MAY_IMPORT = {"coordinator.client", "coordinator.db.embedded"}


def _coordinator_imports(path: Path) -> Iterator[str]:
    """What of the coordinator a script imports, wherever in the file.

    `from package import name` counts as `package.name`, the module or the
    attribute it names: `from coordinator import cli` is `coordinator.cli`.
    """
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        yield from (name for name in names if name.split(".")[0] == "coordinator")


def _imports_under(folder: str) -> dict[str, set[str]]:
    return {
        str(path.relative_to(REPOSITORY)): set(_coordinator_imports(path))
        for path in sorted((REPOSITORY / folder).rglob("*.py"))
    }


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def test_the_benchmarks_do_not_import_the_cli() -> None:
    # The benchmarks drive the coordinator as a user does (`python -m
    # coordinator` in a subprocess) or through the layers below the CLI.
    wrong = {
        f"{script} imports {module}"
        for script, modules in _imports_under("bench").items()
        for module in modules
        if _within(module, "coordinator.cli") or _within(module, "coordinator.__main__")
    }
    assert wrong == set()


def test_the_examples_use_the_sdk() -> None:
    wrong = {
        f"{script} imports {module}"
        for script, modules in _imports_under("examples").items()
        for module in modules
        if not any(_within(module, allowed) for allowed in EXAMPLES_MAY_IMPORT)
    }
    assert wrong == set()


def test_the_import_scan_of_scripts_sees_imports_inside_functions(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(
        "import coordinator.client\n"
        "def main():\n"
        "    from coordinator.cli.common import open_core\n"
        "    from coordinator import cli\n"
        "    import json\n"
    )
    assert set(_coordinator_imports(script)) == {
        "coordinator.client",
        "coordinator.cli.common.open_core",
        "coordinator.cli",
    }


# The one core module that reads `Settings`: it builds each service's config
# from them. Every other core module gets the config its service reads, so a
# service's dependencies are written in its config and it is built alone in a
# test (tests/integration/test_services_alone.py).
SETTINGS_READERS_IN_CORE = {"coordinator.core.configs"}


def _names_settings(path: Path) -> list[int]:
    """Lines naming `Settings` or importing `coordinator.config` (where it is defined)."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if (isinstance(node, ast.Name) and node.id == "Settings")
        or (isinstance(node, ast.Attribute) and node.attr == "Settings")
        or (isinstance(node, ast.ImportFrom) and node.module == "coordinator.config")
        or (
            isinstance(node, ast.Import)
            and any(alias.name == "coordinator.config" for alias in node.names)
        )
    ]


def test_core_services_never_receive_the_settings() -> None:
    # The Coordinator, which `connect` builds from the settings, hands them to
    # configs.py and keeps the configs (the doors' too); no service is given them.
    allowed = SETTINGS_READERS_IN_CORE | {"coordinator.core.coordinator"}
    found = {
        f"{name}:{line}"
        for name, path in _modules().items()
        if _layer(name) == "core" and name not in allowed
        for line in _names_settings(path)
    }
    assert found == set()


def test_the_settings_rule_sees_a_service_that_takes_them(tmp_path: Path) -> None:
    service = tmp_path / "service.py"
    service.write_text(
        "from coordinator.config import Settings\n\n"
        "class Service:\n"
        "    def __init__(self, settings: Settings) -> None: ...\n"
    )
    assert sorted(_names_settings(service)) == [1, 4]


# Past this many lines a module says at its top why it is one module.
LONGEST_MODULE = 400
LONG_ON_PURPOSE = "Long on purpose:"


def test_a_long_module_says_why_at_its_top() -> None:
    unexplained = {
        f"{name} ({lines} lines)"
        for name, path in _modules().items()
        if (lines := len(path.read_text().splitlines())) > LONGEST_MODULE
        and LONG_ON_PURPOSE not in (ast.get_docstring(ast.parse(path.read_text())) or "")
    }
    assert unexplained == set()


# Metrics are made by the meter (coordinator/metrics.py), one per core, on a
# registry of its own: a metric made at import time, or anywhere else, is
# state of the process that every core in it would share.
METRIC_TYPES = {"Counter", "Gauge", "Histogram", "Summary", "Info", "Enum"}
METER_MODULE = "coordinator.metrics"


def _metric_state(path: Path) -> list[str]:
    """Where a module makes a Prometheus metric (`line:import time` outside any function,
    `line:in function`) or names the client's global REGISTRY (`line:global registry`)."""
    tree = ast.parse(path.read_text(), str(path))
    makers = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "prometheus_client"
        for alias in node.names
        if alias.name in METRIC_TYPES
    }
    in_functions = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for inner in ast.walk(node)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            function = node.func
            made = (isinstance(function, ast.Name) and function.id in makers) or (
                isinstance(function, ast.Attribute)
                and function.attr in METRIC_TYPES
                and isinstance(function.value, ast.Name)
                and function.value.id == "prometheus_client"
            )
            if made:
                where = "in function" if id(node) in in_functions else "import time"
                found.append(f"{node.lineno}:{where}")
        elif (isinstance(node, ast.Name) and node.id == "REGISTRY") or (
            isinstance(node, ast.alias) and node.name == "REGISTRY"
        ):
            found.append(f"{getattr(node, 'lineno', 0)}:global registry")
    return found


def test_no_module_level_metric_state() -> None:
    found = {
        f"{name}:{spot}"
        for name, path in _modules().items()
        for spot in _metric_state(path)
        if not (name == METER_MODULE and spot.endswith(":in function"))
    }
    assert found == set()


def test_the_metric_state_rule_sees_a_metric_made_at_import_time(tmp_path: Path) -> None:
    module = tmp_path / "counting.py"
    module.write_text(
        "from prometheus_client import REGISTRY, Counter as C\n"
        "from collections import Counter\n\n"
        "SENT = C('sent', 'Messages sent.')\n"
        "TALLY = Counter()\n\n"
        "def meter() -> C:\n"
        "    return C('sent', 'Messages sent.', registry=REGISTRY)\n"
    )
    assert sorted(_metric_state(module)) == [
        "1:global registry",
        "4:import time",
        "8:global registry",
        "8:in function",
    ]


def _rewirings(path: Path) -> list[int]:
    """Lines that wire an object after the function that built it constructed it.

    Built means `part = Part(...)` or `self.part = Part(...)` in the same
    function; wiring means handing it a member of another object afterwards
    (`part.hook = other.method`, or a lambda) or copying one of its members
    onto self (`self.method = part.method`). Filling in a record built there
    (`result.count = 3`) is not wiring. Dependencies go to constructors, and
    a class's API is its own.
    """
    lines = []
    for function in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        built: set[str] = set()
        for node in ast.walk(function):
            if not isinstance(node, ast.Assign):
                continue
            for target in node.targets:
                if (
                    isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name)
                    and node.value.func.id[:1].isupper()
                ):
                    built.add(ast.unparse(target))
                elif (
                    isinstance(target, ast.Attribute)
                    and isinstance(node.value, ast.Attribute | ast.Lambda)
                    and (
                        ast.unparse(target.value) in built
                        or (
                            isinstance(node.value, ast.Attribute)
                            and ast.unparse(node.value.value) in built
                            and node.value.attr == target.attr
                        )
                    )
                ):
                    lines.append(node.lineno)
    return lines


def test_objects_get_their_dependencies_from_their_constructors() -> None:
    found = {f"{name}:{line}" for name, path in _modules().items() for line in _rewirings(path)}
    assert found == set()


def test_the_wiring_rule_sees_a_facade_and_a_hook_set_late(tmp_path: Path) -> None:
    facade = tmp_path / "facade.py"
    facade.write_text(
        "class Facade:\n"
        "    def __init__(self) -> None:\n"
        "        part = Part()\n"
        "        self.other = Other()\n"
        "        self.run = part.run\n"
        "        self.other.hook = part.run\n"
        "        part.hook = self.other.hook\n"
        "        self.kept = part\n"
        "        part.count = len(self.kept)\n"
    )
    assert _rewirings(facade) == [5, 6, 7]
