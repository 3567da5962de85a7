"""The jobs' database is at this coordinator's revision, or the job is refused.

The jobs read (and the archive deletes) but never migrate: a database a
scheduler points them at is changed by `coordinator db upgrade`, by its
operator, or not at all; an empty one is not given a schema.
"""

from __future__ import annotations

from coordinator.config import Settings
from coordinator.db import migrate
from coordinator.db.ready import describe_database
from coordinator.pipeline.runner import JobError, Outcome


def require_current_revision(url: str, settings: Settings) -> None:
    """Refuse (`Outcome.schema`) unless the schema at `url` is at this code's revision.

    `settings` name the database for people. A database that cannot be read
    raises the database's own error.
    """
    current = migrate.current_revisions(url, schema=settings.database_schema)
    expected = migrate.head_revisions()
    if set(current) == set(expected):
        return
    where = describe_database(settings)
    wanted = ", ".join(expected)
    if not current:
        found = "has no coordinator schema"
        remedy = "`coordinator db upgrade` creates it"
    elif set(current) <= migrate.known_revisions():
        found = f"is at revision {', '.join(current)}"
        remedy = "`coordinator db upgrade` migrates it"
    else:
        found = f"is at revision {', '.join(current)}, newer than this coordinator knows"
        remedy = "run the pipeline of the coordinator that migrated it"
    raise JobError(
        f"the database ({where}) {found}; the pipeline needs revision {wanted} and never "
        f"migrates a database itself: {remedy}",
        Outcome.schema,
    )
