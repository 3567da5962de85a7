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


def _parameter_position(
    function: ast.FunctionDef | ast.AsyncFunctionDef, node: ast.expr | None
) -> tuple[int, str] | None:
    """Where `node`, if it is one of `function`'s parameters, is among its arguments."""
    if not isinstance(node, ast.Name):
        return None
    positional = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    if node.id in positional:
        return positional.index(node.id), node.id
    if node.id in (a.arg for a in function.args.kwonlyargs):
        return -1, node.id
    return None


def _called_argument(
    call: ast.Call, function: ast.FunctionDef | ast.AsyncFunctionDef, at: tuple[int, str]
) -> ast.expr | None:
    position, keyword = at
    first = function.args.args[0].arg if function.args.args else None
    if isinstance(call.func, ast.Attribute) and first in ("self", "cls"):
        position -= 1  # bound: self is not among the call's arguments
    if position < 0:  # keyword-only
        return next((k.value for k in call.keywords if k.arg == keyword), None)
    return _argument(call, position, keyword)


@dataclass
class _Call:
    node: ast.Call
    enclosing: str
    function: ast.FunctionDef | ast.AsyncFunctionDef | None


class _Finder(ast.NodeVisitor):
    """Every call of the file with the function it is in."""

    def __init__(self) -> None:
        self.scopes: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        self.calls: list[_Call] = []
        self.beside: dict[int, ast.Call] = {}  # query(...) calls by id -> the call given them

    def _scope(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scopes.append(node)
        self.generic_visit(node)
        self.scopes.pop()

    visit_FunctionDef = _scope
    visit_AsyncFunctionDef = _scope

    def visit_Call(self, node: ast.Call) -> None:
        if (
            isinstance(node.func, ast.Attribute)
            and node.func.attr == "execute"
            and node.args
            and isinstance(node.args[0], ast.Call)
        ):
            self.beside[id(node.args[0])] = node  # conn.execute(query("name"), params)
        function = self.scopes[-1] if self.scopes else None
        enclosing = function.name if function else "<module>"
        self.calls.append(_Call(node, enclosing, function))
        self.generic_visit(node)


def _callee(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def call_sites(path: Path, root: Path) -> list[CallSite]:
    """The file's calls of the layer.

    A function that passes its own parameter on as the name or the parameters
    (a small wrapper: `_drain(conn, name, params)`) is read at its calls in the
    same file instead, each with the literal it is given there.
    """
    tree = ast.parse(path.read_text(), str(path))
    aliases = _layer_aliases(tree)
    if not aliases:
        return []
    constants = _module_constants(tree)
    finder = _Finder()
    finder.visit(tree)
    where = path.relative_to(root)
    sites: list[CallSite] = []
    for call in finder.calls:
        callee = _callee(call.node)
        layer = aliases.get(callee) if isinstance(call.node.func, ast.Name) and callee else None
        if layer is None:
            continue
        position = LAYER[layer]
        name_node = _argument(call.node, position, "name")
        if layer == "query":
            outer = finder.beside.get(id(call.node))
            params_node = _argument(outer, 1, "params") if outer else None
            scope = call.function or outer
        else:
            outer = call.node
            params_node = _argument(call.node, position + 1, "params")
            scope = call.function or call.node
        name = _literal(name_node, constants)
        params = _params(params_node, scope) if outer is not None else None
        wrapper = call.function
        name_at = _parameter_position(wrapper, name_node) if wrapper and name is None else None
        params_at = (
            _parameter_position(wrapper, params_node)
            if wrapper and params is None and layer != "query"
            else None
        )
        callers = (
            [c for c in finder.calls if _callee(c.node) == wrapper.name]
            if wrapper and (name_at or params_at)
            else []
        )
        if not callers:
            sites.append(CallSite(where, call.node.lineno, layer, call.enclosing, name, params))
            continue
        assert wrapper is not None
        for caller in callers:
            given_name = name
            if name_at:
                given_name = _literal(_called_argument(caller.node, wrapper, name_at), constants)
            given_params = params
            if params_at:
                given = _called_argument(caller.node, wrapper, params_at)
                given_params = _params(given, caller.function or caller.node)
            sites.append(
                CallSite(
                    where, caller.node.lineno, layer, caller.enclosing, given_name, given_params
                )
            )
    return sites


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
