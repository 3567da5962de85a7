"""The statements that place the coordinator in its schema (sql/installation.sql)."""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

from coordinator.config import DATABASE_SCHEMA_PATTERN
from coordinator.db.queries import parse_queries

# The revision that moved an installation from public into its schema:
# below it, every object (and the version table) is in public.
MOVE_REVISION = "0017"


@cache
def _blocks() -> dict[str, str]:
    source = files("coordinator.db").joinpath("sql", "installation.sql").read_text()
    return parse_queries(source)


def installation_sql(name: str, schema: str) -> str:
    """Block `name` of installation.sql for the schema named `schema`."""
    if not re.match(DATABASE_SCHEMA_PATTERN, schema):
        # Substituted into SQL: only what the setting accepts.
        raise ValueError(f"not a plain schema name: {schema!r}")
    return _blocks()[name].replace("{schema}", schema)
