"""Which database a process uses: the configured server, or the embedded default."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coordinator.config import Settings
from coordinator.db import migrate
from coordinator.db.embedded import embedded_exists, start_embedded
from coordinator.db.urls import in_schema, libpq_url, redact


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

    Every session on the URL starts with search_path set to the coordinator's
    schema (settings.database_schema).
    """
    if settings.database_url:
        return in_schema(libpq_url(settings.database_url), settings.database_schema)
    if not create and not embedded_exists(settings.data_dir):
        raise NoEmbeddedDatabase(settings.data_dir)
    url = libpq_url(start_embedded(settings.data_dir))
    return in_schema(url, settings.database_schema)


def ready_database(settings: Settings, *, create: bool = True) -> str:
    """The database URL with every migration applied."""
    url = database_url_for(settings, create=create)
    migrate.upgrade(url, schema=settings.database_schema)
    return url


class NotMigrated(LookupError):
    """The database is not at this coordinator's revision: the sentence says what to do."""


def migrated_database(settings: Settings, *, create: bool = False) -> str:
    """The database URL, refused (NotMigrated) unless it is at this coordinator's revision.

    For the commands that only read or act on existing state: they never
    migrate (nor create anything in) a database; `coordinator db upgrade`
    and `coordinator serve` do.
    """
    url = database_url_for(settings, create=create)
    problem = revision_problem(url, settings)
    if problem is not None:
        raise NotMigrated(problem)
    return url


@dataclass(frozen=True, slots=True)
class RevisionGap:
    """How a database's revision differs from this code's, in words for a sentence."""

    where: str  # the database, as people may see it
    found: str  # "has no coordinator schema", "is at revision 0016", ...
    expected: str  # the revision this code needs
    remedy: str  # what to do, when this code can do it (not when the database is newer)
    newer: bool  # migrated by a newer coordinator


def revision_gap(url: str, settings: Settings) -> RevisionGap | None:
    """How the database at `url` differs from this code's revision; None when it does not."""
    current = migrate.current_revisions(url, schema=settings.database_schema)
    expected = migrate.head_revisions()
    if set(current) == set(expected):
        return None
    at = ", ".join(current)
    if not current:
        found, remedy = "has no coordinator schema", "`coordinator db upgrade` creates it"
    elif set(current) <= migrate.known_revisions():
        found, remedy = f"is at revision {at}", "`coordinator db upgrade` migrates it"
    else:
        found, remedy = f"is at revision {at}, newer than this coordinator knows", ""
    return RevisionGap(
        describe_database(settings), found, ", ".join(expected), remedy, newer=not remedy
    )


def revision_problem(url: str, settings: Settings) -> str | None:
    """What is wrong with the revision of the database at `url`, as a sentence; None if nothing."""
    gap = revision_gap(url, settings)
    if gap is None:
        return None
    remedy = "use the coordinator that migrated it" if gap.newer else gap.remedy
    return (
        f"the database ({gap.where}) {gap.found}, this coordinator needs revision "
        f"{gap.expected}: {remedy}"
    )
