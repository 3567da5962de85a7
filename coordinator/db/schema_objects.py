"""The schema beyond its tables, defined once in `coordinator/db/sql/schema/`.

The tables are SQLAlchemy metadata (`coordinator.db.schema`). Their storage
parameters, the trigger functions, the triggers, the views and the grants
of the read-only role are SQL, one file per area, in blocks headed
`-- name: NAME` (the named-query format), one statement per block.
`create_schema` builds the whole schema on an empty database;
`tests/integration/test_schema_matches_migrations.py` checks that it comes
out exactly as the migrations leave a database at head.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

from sqlalchemy import create_engine, pool, text

from coordinator.config import DEFAULT_DATABASE_SCHEMA
from coordinator.db.installation import installation_sql
from coordinator.db.queries import parse_queries
from coordinator.db.schema import metadata
from coordinator.db.urls import in_schema, sqlalchemy_url

SCHEMA_FILES = ("messages", "checkback", "delivery", "pipeline", "reader")

# The order blocks run in, once the tables exist: storage only alters
# tables, a trigger needs its function, views come after the functions so
# that they may call any, and privileges last, on objects that all exist: a
# role (created by a DO block, the only way to create it only if missing),
# then the grants to it. Within a kind, file order, then block order.
KINDS = {
    "storage": re.compile(r"ALTER\s+TABLE\b", re.IGNORECASE),
    "function": re.compile(r"CREATE\s+(OR\s+REPLACE\s+)?FUNCTION\b", re.IGNORECASE),
    "trigger": re.compile(r"CREATE\s+(OR\s+REPLACE\s+)?TRIGGER\b", re.IGNORECASE),
    "view": re.compile(r"CREATE\s+(OR\s+REPLACE\s+)?VIEW\b", re.IGNORECASE),
    "role": re.compile(r"DO\b", re.IGNORECASE),
    "grant": re.compile(r"(GRANT|REVOKE)\b", re.IGNORECASE),
}
_LEADING_COMMENTS = re.compile(r"\A(\s*--[^\n]*\n)*\s*")


def kind_of(statement: str) -> str:
    """Which of KINDS a schema block creates (its leading comments skipped)."""
    code = _LEADING_COMMENTS.sub("", statement, count=1)
    for kind, pattern in KINDS.items():
        if pattern.match(code):
            return kind
    raise ValueError(f"not a schema statement of a known kind: {code[:60]!r}")


@cache
def schema_blocks() -> dict[str, tuple[str, str]]:
    """Every block of the schema files: name -> (kind, SQL), in file order."""
    folder = files("coordinator.db").joinpath("sql", "schema")
    blocks: dict[str, tuple[str, str]] = {}
    for area in SCHEMA_FILES:
        for name, sql in parse_queries(folder.joinpath(f"{area}.sql").read_text()).items():
            if name in blocks:
                raise ValueError(f"schema block {name!r} is defined twice ({area}.sql)")
            blocks[name] = (kind_of(sql), sql)
    return blocks


def schema_statements() -> list[str]:
    """The schema files' statements in the order `create_schema` runs them."""
    blocks = schema_blocks().values()
    return [sql for kind in KINDS for block_kind, sql in blocks if block_kind == kind]


def create_schema(database_url: str, schema: str = DEFAULT_DATABASE_SCHEMA) -> None:
    """Create the schema `schema`, its tables, then everything in the schema files.

    In one transaction, for an empty database; it does not stamp an Alembic
    revision. The connection's search_path is `schema`: the files name
    their objects unqualified, and their functions keep it (FROM CURRENT).
    """
    url = sqlalchemy_url(in_schema(database_url, schema))
    engine = create_engine(url, poolclass=pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(installation_sql("create_schema", schema))
            metadata.create_all(conn)
            for statement in schema_statements():
                # text(), as Alembic's op.execute does: the same SQL, escaped
                # the same way for psycopg.
                conn.execute(text(statement))
    finally:
        engine.dispose()
