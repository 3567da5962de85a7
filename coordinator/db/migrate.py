"""Alembic, driven from the package (`coordinator db ...`) or from alembic.ini."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.util import CommandError
from sqlalchemy import create_engine

from coordinator.db.urls import sqlalchemy_url

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


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # Passed as an attribute, not an ini option: configparser would try to
    # interpolate any '%' in a URL-encoded password.
    config.attributes["database_url"] = database_url
    return config


class RevisionError(ValueError):
    """A revision Alembic cannot go to: unknown, or not above (below) the current one."""


@contextmanager
def _revision_errors() -> Iterator[None]:
    try:
        yield
    except CommandError as error:
        raise RevisionError(" ".join(str(error).split())) from None


def upgrade(database_url: str, revision: str = "heads") -> None:
    with _revision_errors():
        command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    with _revision_errors():
        command.downgrade(alembic_config(database_url), revision)


def current_revisions(database_url: str) -> tuple[str, ...]:
    engine = create_engine(sqlalchemy_url(database_url))
    try:
        with engine.connect() as conn:
            return tuple(MigrationContext.configure(conn).get_current_heads())
    finally:
        engine.dispose()


def head_revisions() -> tuple[str, ...]:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(migrations_dir()))
    return tuple(script.get_heads())
