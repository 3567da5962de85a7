"""Which database a process uses: the configured server, or the embedded default."""

from __future__ import annotations

from coordinator.config import Settings
from coordinator.db import migrate
from coordinator.db.embedded import start_embedded
from coordinator.db.urls import libpq_url


def database_url_for(settings: Settings) -> str:
    """The configured server, never starting one; else the embedded server."""
    if settings.database_url:
        return libpq_url(settings.database_url)
    return start_embedded(settings.data_dir)


def ready_database(settings: Settings) -> str:
    """The database URL with every migration applied."""
    url = database_url_for(settings)
    migrate.upgrade(url)
    return url
