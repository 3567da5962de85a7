"""`coordinator pipeline ...` never migrates the database it reads, nor gives an empty one a schema.

A job pointed at a database whose schema is not at this code's revision is
refused before Spark starts, with one sentence and exit 8, and the database
is left exactly as it was.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from coordinator.cli import app
from coordinator.db import migrate

runner = CliRunner()
SUBCOMMANDS = (
    ("report", "-o", "{out}"),
    ("archive", "--archive-dir", "{out}"),
    ("audit", "-o", "{out}"),
)


def _invoke(url: str, command: tuple[str, ...], out: Path):  # type: ignore[no-untyped-def]
    args = [part.format(out=out) for part in command]
    return runner.invoke(app, ["--database-url", url, "pipeline", *args])


def _public_relations(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace "
            "ORDER BY relname"
        ).fetchall()
    return [name for (name,) in rows]


@pytest.mark.parametrize("command", SUBCOMMANDS, ids=lambda c: c[0])
def test_a_database_at_an_older_revision_is_refused_and_left_as_it_was(
    database_url: str, tmp_path: Path, command: tuple[str, ...]
) -> None:
    (head,) = migrate.head_revisions()
    migrate.downgrade(database_url, "-1")
    (older,) = migrate.current_revisions(database_url)
    relations = _public_relations(database_url)

    result = _invoke(database_url, command, tmp_path / "out")

    assert result.exit_code == 8, result.output
    (line,) = result.output.splitlines()
    assert line.startswith("error: the database (") and "Traceback" not in line
    assert f"is at revision {older}; the pipeline needs revision {head}" in line
    assert line.endswith("never migrates a database itself: `coordinator db upgrade` migrates it")
    assert migrate.current_revisions(database_url) == (older,)
    assert _public_relations(database_url) == relations
    assert not (tmp_path / "out").exists()  # refused before any output


@pytest.mark.parametrize("command", SUBCOMMANDS, ids=lambda c: c[0])
def test_an_empty_database_is_refused_and_nothing_is_created(
    empty_database: str, tmp_path: Path, command: tuple[str, ...]
) -> None:
    result = _invoke(empty_database, command, tmp_path / "out")

    assert result.exit_code == 8, result.output
    (line,) = result.output.splitlines()
    assert "has no coordinator schema" in line
    assert line.endswith("`coordinator db upgrade` creates it")
    assert _public_relations(empty_database) == []  # not even alembic_version
    assert migrate.current_revisions(empty_database) == ()


def test_a_database_newer_than_this_code_is_refused(database_url: str, tmp_path: Path) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")

    result = _invoke(database_url, ("report", "-o", "{out}"), tmp_path / "out")

    assert result.exit_code == 8, result.output
    assert "is at revision 9999, newer than this coordinator knows" in result.output
    assert migrate.current_revisions(database_url) == ("9999",)
