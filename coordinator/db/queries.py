"""Loads the named queries of queries.sql (blocks headed `-- name: NAME`)."""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

_NAME_LINE = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def parse_queries(source: str) -> dict[str, str]:
    parts = _NAME_LINE.split(source)
    # parts = [preamble, name1, body1, name2, body2, ...]
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name] = body.strip().rstrip(";")
    return queries


@cache
def all_queries() -> dict[str, str]:
    return parse_queries(files("coordinator.db").joinpath("queries.sql").read_text())


def query(name: str) -> str:
    return all_queries()[name]
