"""Which database a process uses: the configured server, or the embedded default."""

from __future__ import annotations

from pathlib import Path

from coordinator.config import Settings
from coordinator.db import migrate
from coordinator.db.embedded import embedded_exists, start_embedded
from coordinator.db.urls import libpq_url, redact


class NoEmbeddedDatabase(LookupError):
    """The embedded server's data directory holds no database, and none may be created."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        super().__init__(f"no coordinator database in {data_dir}")


def describe_database(settings: Settings) -> str:
    """Which database the settings name, for people: a URL without its password, or a directory."""
    if settings.database_url:
        return redact(libpq_url(settings.database_url))
    return f"embedded PostgreSQL, data in {settings.data_dir}"


def database_url_for(settings: Settings, *, create: bool = True) -> str:
    """The configured server, never starting one; else the embedded server.

    With create=False an embedded data directory that holds no database yet
    is refused (NoEmbeddedDatabase) instead of initialized: a command that
    reads or changes existing state, run from the wrong directory, would
    otherwise report on a new, empty database.
    """
    if settings.database_url:
        return libpq_url(settings.database_url)
    if not create and not embedded_exists(settings.data_dir):
        raise NoEmbeddedDatabase(settings.data_dir)
    return libpq_url(start_embedded(settings.data_dir))


def ready_database(settings: Settings, *, create: bool = True) -> str:
    """The database URL with every migration applied."""
    url = database_url_for(settings, create=create)
    migrate.upgrade(url)
    return url
