"""The jobs' database is at this coordinator's revision, or the job is refused.

The jobs read (and the archive deletes) but never migrate: a database a
scheduler points them at is changed by `coordinator db upgrade`, by its
operator, or not at all; an empty one is not given a schema.
"""

from __future__ import annotations

from coordinator.config import Settings
from coordinator.db.ready import revision_gap
from coordinator.pipeline.runner import JobError, Outcome


def require_current_revision(url: str, settings: Settings) -> None:
    """Refuse (`Outcome.schema`) unless the schema at `url` is at this code's revision.

    `settings` name the database for people. A database that cannot be read
    raises the database's own error.
    """
    gap = revision_gap(url, settings)
    if gap is None:
        return
    remedy = "run the pipeline of the coordinator that migrated it" if gap.newer else gap.remedy
    raise JobError(
        f"the database ({gap.where}) {gap.found}; the pipeline needs revision {gap.expected} "
        f"and never migrates a database itself: {remedy}",
        Outcome.schema,
    )
