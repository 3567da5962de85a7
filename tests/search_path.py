"""The tests' own sessions find the coordinator's schema by plain names.

The coordinator's connections set their search_path themselves; a test's
own psycopg session (one that asserts what a table holds) gets it from a
database default given to each migrated test database. The `empty_database`
fixture has no such default, and the tests on it (test_own_schema.py) prove
that the coordinator needs none.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

TEST_SEARCH_PATH = "coordinator, public"


def give_test_search_path(url: str) -> None:
    """New sessions on the database at `url` start in the coordinator's schema."""
    with psycopg.connect(url, autocommit=True) as conn:
        statement = sql.SQL("ALTER DATABASE {} SET search_path = " + TEST_SEARCH_PATH)
        conn.execute(statement.format(sql.Identifier(conn.info.dbname)))
