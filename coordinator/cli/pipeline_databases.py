"""The databases a `coordinator pipeline` job works on.

Every job needs the coordinator's database at this code's revision: the
archive deletes from it, and it is where the report's and the audit's reads
go too, unless read_database_url (`--read-database-url`, typically a
standby) names another server for them, refused likewise unless at the
revision. The audit's producer table is in the coordinator's database
unless --producer-database-url names another.
"""

from __future__ import annotations

import psycopg
import typer
from psycopg.conninfo import conninfo_to_dict

from coordinator.cli.common import database_errors, database_url, settings_from
from coordinator.db.urls import in_schema, libpq_url, redact
from coordinator.pipeline.revision import require_current_revision
from coordinator.pipeline.runner import JobError, Outcome


def current_database(ctx: typer.Context) -> str:
    """The command's database, as it is: refused unless its schema is at this code's revision."""
    url = database_url(ctx)  # neither migrates nor creates an embedded database
    settings = settings_from(ctx)
    with database_errors(settings):
        require_current_revision(url, settings)
    return url


def read_database(ctx: typer.Context, url: str) -> str:
    """Where the report and the audit read: read_database_url when it is set, refused
    unless at this code's revision (a standby replays migrations too); else `url`."""
    settings = settings_from(ctx)
    if not settings.read_database_url:
        return url
    # Named as what it is in every error: the read database, not database_url's.
    reading = settings.model_copy(update={"database_url": settings.read_database_url})
    read_url = in_schema(libpq_url(settings.read_database_url), settings.database_schema)
    with database_errors(reading):
        require_current_revision(read_url, reading)
    return read_url


def producer_url_of(given: str | None, default: str) -> str:
    """--producer-database-url as psycopg takes it; a string libpq cannot parse is bad usage."""
    if given is None:
        return default
    url = libpq_url(given)
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:
        raise JobError(
            f"--producer-database-url is not a PostgreSQL URL: {redact(str(error))}", Outcome.usage
        ) from None
    return url
