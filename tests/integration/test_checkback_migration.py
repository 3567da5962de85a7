"""Migration 0002: producer registry, check requests, their view and trigger; and undoing them.

From 0004 on, a statement-level trigger closes check requests instead of
0002's row trigger; downgrading below 0004 brings the row trigger back.
"""

from __future__ import annotations

import psycopg

from coordinator.db import migrate

CHECKBACK_RELATIONS = {"producers", "check_requests", "check_backs"}


def _relations(db: psycopg.Connection) -> set[str]:
    rows = db.execute(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema IN ('public', 'coordinator')"
    ).fetchall()
    return {name for (name,) in rows}


def _trigger_exists(db: psycopg.Connection) -> bool:
    row = db.execute(
        "SELECT count(*) FROM pg_trigger WHERE tgname = 'messages_close_check_request'"
    ).fetchone()
    return row == (1,)


def test_downgrade_to_0001_removes_the_check_back_schema_and_upgrade_restores_it(
    database_url: str, db: psycopg.Connection
) -> None:
    assert _relations(db) >= CHECKBACK_RELATIONS and not _trigger_exists(db)

    migrate.downgrade(database_url, "0003")
    assert _trigger_exists(db)

    migrate.downgrade(database_url, "0001")
    assert not CHECKBACK_RELATIONS & _relations(db)
    assert not _trigger_exists(db)
    assert db.execute(
        "SELECT count(*) FROM pg_proc WHERE proname = 'coordinator_close_check_request'"
    ).fetchone() == (0,)

    migrate.upgrade(database_url, "0002")
    assert _relations(db) >= CHECKBACK_RELATIONS and _trigger_exists(db)
    migrate.upgrade(database_url)
    assert not _trigger_exists(db)
