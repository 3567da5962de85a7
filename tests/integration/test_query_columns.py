"""Each named query's declared columns are the ones PostgreSQL says it returns.

PostgreSQL prepares and describes every statement without running it. A
statement composed with identifiers (`{table}`, filled in by psycopg.sql)
is described with a stand-in where it needs one.
"""

from __future__ import annotations

import re

import psycopg

from coordinator.db.queries import all_queries

_PARAMETER = re.compile(r"%\((\w+)\)[sbt]")
# composed statements' identifiers: a table shaped like the producer's barrier table
_STAND_INS = {"{table}": "pg_temp.barrier", "{name}": "stand_in"}


def _numbered(text: str) -> str:
    """psycopg's %(name)s placeholders as PostgreSQL's $n."""
    order: list[str] = []

    def number(found: re.Match[str]) -> str:
        if found.group(1) not in order:
            order.append(found.group(1))
        return f"${order.index(found.group(1)) + 1}"

    for identifier, stand_in in _STAND_INS.items():
        text = text.replace(identifier, stand_in)
    return _PARAMETER.sub(number, text).replace("%%", "%")


def test_declared_columns_are_the_described_ones(db: psycopg.Connection) -> None:
    db.execute("CREATE TEMP TABLE barrier (transaction_id text PRIMARY KEY, outcome text)")
    wrong = []
    for name, declared in all_queries().items():
        prepared = db.pgconn.prepare(b"", _numbered(declared.text).encode())
        assert prepared.status == psycopg.pq.ExecStatus.COMMAND_OK, (
            name,
            prepared.error_message.decode(),
        )
        described = db.pgconn.describe_prepared(b"")
        columns = tuple(described.fname(i).decode() for i in range(described.nfields))
        if columns != declared.returns:
            wrong.append(f"{name}: declares {declared.returns}, returns {columns}")
    assert not wrong, "\n".join(wrong)
    assert len(all_queries()) > 90
