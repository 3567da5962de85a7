"""The migrations build exactly the schema in coordinator.db.schema, and undo it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine

from coordinator.db import migrate
from coordinator.db.schema import metadata
from coordinator.db.urls import in_schema, sqlalchemy_url
from tests.processes import clean_environment

REPO = Path(__file__).resolve().parents[2]


def _tables(db: psycopg.Connection, schema: str = "coordinator") -> set[str]:
    rows = db.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", [schema]
    ).fetchall()
    return {name for (name,) in rows}


def _schema_differences(database_url: str) -> list:
    engine = create_engine(sqlalchemy_url(in_schema(database_url, "coordinator")))
    try:
        with engine.connect() as conn:
            return compare_metadata(MigrationContext.configure(conn), metadata)
    finally:
        engine.dispose()


def test_the_migrated_database_matches_the_schema_module(database_url: str) -> None:
    assert _schema_differences(database_url) == []
    assert migrate.current_revisions(database_url) == migrate.head_revisions()


def test_downgrade_removes_everything_and_upgrade_restores_it(
    database_url: str, db: psycopg.Connection
) -> None:
    expected = {
        "messages",
        "message_history",
        "pending_transactions",
        "message_counts",
        "message_timeline",
        "archivable_messages",
        "alembic_version",
    }
    assert expected <= _tables(db)

    migrate.downgrade(database_url, "base")
    # Below the move into the schema, Alembic's table is back in public, and
    # the schema, empty, is gone.
    assert _tables(db, "public") <= {"alembic_version"}
    assert _tables(db) == set()
    assert migrate.current_revisions(database_url) == ()

    migrate.upgrade(database_url)
    assert expected <= _tables(db)
    assert _tables(db, "public") <= {"alembic_version"}
    assert _schema_differences(database_url) == []


def _alembic(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The virtualenv's `alembic` command at the repository root (alembic.ini)."""
    return subprocess.run(
        [str(Path(sys.executable).with_name("alembic")), *args],
        cwd=REPO,
        env=clean_environment({"COORDINATOR_DATABASE_URL": database_url}),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_plain_alembic_at_the_repository_root_works(
    database_url: str, db: psycopg.Connection
) -> None:
    down = _alembic(database_url, "downgrade", "base")
    assert down.returncode == 0, down.stderr
    assert "messages" not in _tables(db)
    up = _alembic(database_url, "upgrade", "head")
    assert up.returncode == 0, up.stderr
    assert "messages" in _tables(db)


def test_plain_alembic_migrates_an_empty_database_to_head_and_one_step_down(
    empty_database: str,
) -> None:
    (head,) = migrate.head_revisions()
    up = _alembic(empty_database, "upgrade", "head")
    assert up.returncode == 0, up.stderr
    assert _schema_differences(empty_database) == []
    current = _alembic(empty_database, "current")
    assert current.returncode == 0, current.stderr
    assert current.stdout.split() == [head, "(head)"]

    down = _alembic(empty_database, "downgrade", "-1")
    assert down.returncode == 0, down.stderr
    (below,) = migrate.current_revisions(empty_database)
    assert below != head
    assert _alembic(empty_database, "upgrade", "head").returncode == 0
    assert migrate.current_revisions(empty_database) == (head,)
