"""Call sites of the named-query layer, read from the source (tests/unit/test_query_calls.py).

A call site is a call of `execute`, `fetch_all`, `fetch_one`, `execute_sync`
or `query` (imported from coordinator.db.queries). Its name and parameters
are read where they are literal: a string name; a dict of string keys, given
in the call or assigned once to a local name in the same function; `{**other,
"key": ...}` gives the keys it adds. A name given as a constant of the module
(`QUERY = "name"`) is read too. `conn.execute(query("name"), {...})`
passes its parameters beside the text.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from coordinator.db.queries import NamedQuery

# the layer's functions, by the position of the name among their arguments
LAYER = {"execute": 1, "fetch_all": 1, "fetch_one": 1, "execute_sync": 1, "query": 0}
FETCHING = frozenset({"fetch_all", "fetch_one"})


@dataclass(frozen=True)
class Params:
    keys: frozenset[str]
    # the keys of a `**spread` are not read: the call passes at least `keys`
    at_least: bool = False


@dataclass(frozen=True)
class CallSite:
    path: Path
    line: int
    function: str  # the layer's function
    enclosing: str  # the function (or module) the call is in
    name: str | None  # None: not a literal
    params: Params | None  # None: not read (not literal, or given elsewhere)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line} (in {self.enclosing})"


def _layer_aliases(tree: ast.Module) -> dict[str, str]:
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "coordinator.db.queries":
            for alias in node.names:
                if alias.name in LAYER:
                    aliases[alias.asname or alias.name] = alias.name
    return aliases


def _dict_params(node: ast.Dict) -> Params | None:
    keys: set[str] = set()
    spread = False
    for key in node.keys:
        if key is None:
            spread = True
        elif isinstance(key, ast.Constant) and isinstance(key.value, str):
            keys.add(key.value)
        else:
            return None
    return Params(frozenset(keys), at_least=spread)


def _assigned_dicts(scope: ast.AST) -> dict[str, ast.Dict | None]:
    """Local names assigned exactly once, to a dict display (None: anything else)."""
    found: dict[str, ast.Dict | None] = {}
    for node in ast.walk(scope):
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets, value = [node.target], node.value
        for target in targets:
            if isinstance(target, ast.Name):
                seen = target.id in found
                found[target.id] = None if seen or not isinstance(value, ast.Dict) else value
    return found


def _params(node: ast.expr | None, scope: ast.AST) -> Params | None:
    if node is None or (isinstance(node, ast.Constant) and node.value is None):
        return Params(frozenset())
    if isinstance(node, ast.Dict):
        return _dict_params(node)
    if isinstance(node, ast.Name):
        assigned = _assigned_dicts(scope).get(node.id)
        return None if assigned is None else _dict_params(assigned)
    return None


def _module_constants(tree: ast.Module) -> dict[str, str]:
    return {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }


def _literal(node: ast.expr | None, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _argument(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    if len(call.args) > position:
        return call.args[position]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


class _Finder(ast.NodeVisitor):
    def __init__(self, path: Path, aliases: dict[str, str], constants: dict[str, str]) -> None:
        self.path = path
        self.aliases = aliases
        self.constants = constants
        self.scopes: list[tuple[str, ast.AST]] = []
        self.sites: list[CallSite] = []
        self.beside: dict[int, ast.Call] = {}  # query(...) calls by id -> the call given them

    def _scope(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scopes.append((node.name, node))
        self.generic_visit(node)
        self.scopes.pop()

    visit_FunctionDef = _scope
    visit_AsyncFunctionDef = _scope

    def visit_Call(self, node: ast.Call) -> None:
        if node.args and isinstance(node.args[0], ast.Call):
            self.beside[id(node.args[0])] = node
        function = self.aliases.get(node.func.id) if isinstance(node.func, ast.Name) else None
        if function is not None:
            enclosing, scope = self.scopes[-1] if self.scopes else ("<module>", None)
            position = LAYER[function]
            name_node = _argument(node, position, "name")
            name = _literal(name_node, self.constants)
            if function == "query":
                outer = self.beside.get(id(node))
                params = _params(_argument(outer, 1, "params"), scope or outer) if outer else None
            else:
                params = _params(_argument(node, position + 1, "params"), scope or node)
            self.sites.append(CallSite(self.path, node.lineno, function, enclosing, name, params))
        self.generic_visit(node)


def call_sites(path: Path, root: Path) -> list[CallSite]:
    tree = ast.parse(path.read_text(), str(path))
    aliases = _layer_aliases(tree)
    if not aliases:
        return []
    finder = _Finder(path.relative_to(root), aliases, _module_constants(tree))
    finder.visit(tree)
    return finder.sites


def all_call_sites(root: Path, folders: tuple[str, ...]) -> Iterator[CallSite]:
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            if path.name != "queries.py" or path.parent.name != "db":
                yield from call_sites(path, root)


def problems(site: CallSite, queries: dict[str, NamedQuery]) -> list[str]:
    """What is wrong with one call site whose name is literal ([] when nothing is)."""
    assert site.name is not None
    declared = queries.get(site.name)
    if declared is None:
        return [f"{site.where}: no query named {site.name!r}"]
    found: list[str] = []
    if site.params is not None:
        missing = declared.params - site.params.keys
        unknown = site.params.keys - declared.params
        if missing and not site.params.at_least:
            found.append(f"{site.where}: {site.name} is not given {sorted(missing)}")
        if unknown:
            found.append(f"{site.where}: {site.name} takes no {sorted(unknown)}")
    if site.function in FETCHING and not declared.returns:
        found.append(f"{site.where}: {site.name} returns no rows to {site.function}")
    if site.function == "execute" and declared.returns:
        found.append(f"{site.where}: {site.name} returns rows: fetch them")
    return found
