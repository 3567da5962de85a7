"""Alembic, driven from the package (`coordinator db ...`) or from alembic.ini."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, create_engine

from coordinator.config import DEFAULT_DATABASE_SCHEMA
from coordinator.db.installation import installation_sql
from coordinator.db.urls import in_schema, sqlalchemy_url

# coordinator/, wherever it was imported from.
_PACKAGE = Path(__file__).resolve().parents[1]


def migrations_dir() -> Path:
    """The Alembic environment (env.py and versions/).

    In a source checkout (also an editable install) it is the top-level
    `migrations/` beside the package, where alembic.ini points; an installed
    wheel carries it inside the package as `coordinator/migrations/`
    (pyproject.toml's package-dir). Found by path, not imported: the versions
    are files Alembic loads itself, so whichever tree `coordinator` came from
    gives its own migrations.
    """
    for candidate in (_PACKAGE / "migrations", _PACKAGE.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError(f"no Alembic environment (migrations/env.py) at or beside {_PACKAGE}")


def alembic_config(database_url: str, schema: str = DEFAULT_DATABASE_SCHEMA) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # Passed as an attribute, not an ini option: configparser would try to
    # interpolate any '%' in a URL-encoded password.
    config.attributes["database_url"] = database_url
    config.attributes["database_schema"] = schema
    return config


def version_table_schema(conn: Connection, schema: str) -> str | None:
    """The schema that holds the coordinator's Alembic version table, if any.

    `schema`'s own; else public's, when it holds a revision of these
    migrations (an installation made before the coordinator had a schema:
    an application's version table there is not ours).
    """
    found = version_tables(conn, schema)
    if schema in found:
        return schema
    if "public" in found:
        revisions = {
            row[0] for row in conn.exec_driver_sql(installation_sql("public_revisions", schema))
        }
        if revisions and revisions <= known_revisions():
            return "public"
    return None


def version_tables(conn: Connection, schema: str) -> set[str]:
    """Which of `schema` and public have a table named alembic_version."""
    return {row[0] for row in conn.exec_driver_sql(installation_sql("version_tables", schema))}


def known_revisions() -> set[str]:
    return {revision.revision for revision in _script().walk_revisions()}


class RevisionError(ValueError):
    """A revision Alembic cannot go to: unknown, or not above (below) the current one."""


@contextmanager
def _revision_errors() -> Iterator[None]:
    try:
        yield
    except CommandError as error:
        raise RevisionError(" ".join(str(error).split())) from None


def upgrade(
    database_url: str, revision: str = "heads", *, schema: str = DEFAULT_DATABASE_SCHEMA
) -> None:
    with _revision_errors():
        command.upgrade(alembic_config(database_url, schema), revision)


def downgrade(
    database_url: str, revision: str = "base", *, schema: str = DEFAULT_DATABASE_SCHEMA
) -> None:
    with _revision_errors():
        command.downgrade(alembic_config(database_url, schema), revision)


def current_revisions(
    database_url: str, *, schema: str = DEFAULT_DATABASE_SCHEMA
) -> tuple[str, ...]:
    """The revisions the database is at; () when it has none. Reads only."""
    engine = create_engine(sqlalchemy_url(in_schema(database_url, schema)))
    try:
        with engine.connect() as conn:
            where = version_table_schema(conn, schema)
            if where is None:
                return ()
            context = MigrationContext.configure(conn, opts={"version_table_schema": where})
            return tuple(context.get_current_heads())
    finally:
        engine.dispose()


def head_revisions() -> tuple[str, ...]:
    return tuple(_script().get_heads())


def _script() -> ScriptDirectory:
    """The revisions this code carries (migrations/versions)."""
    return ScriptDirectory(str(migrations_dir()))
