"""The retention job: APScheduler runs a round every retention_interval_seconds.

Beside the check-back job, in every serving node, run the same way
(`core.periodic.PeriodicRound`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from coordinator.core.periodic import PeriodicRound
from coordinator.core.retention.config import RetentionConfig
from coordinator.domain.retention import RetentionResult

log = logging.getLogger(__name__)

JOB_ID = "retention-round"
# A round stops between batches; each batch is one short statement.
ROUND_FINISH_SECONDS = 10.0


class RetentionScheduler(PeriodicRound[RetentionResult]):
    def __init__(
        self, run_round: Callable[[], Awaitable[RetentionResult]], interval_seconds: float
    ) -> None:
        # Each batch commits alone: a round cut short loses nothing. The round
        # logs what it removed itself (service.py).
        super().__init__(
            job_id=JOB_ID,
            what="retention round",
            log=log,
            run_round=run_round,
            interval_seconds=interval_seconds,
            finish_seconds=ROUND_FINISH_SECONDS,
        )


@contextlib.asynccontextmanager
async def running_retention(
    run_round: Callable[[], Awaitable[RetentionResult]], config: RetentionConfig
) -> AsyncIterator[RetentionScheduler | None]:
    """The retention job for the lifetime of a served node (unless disabled)."""
    if not config.retention_enabled:
        yield None
        return
    scheduler = RetentionScheduler(run_round, config.retention_interval_seconds)
    scheduler.start()
    try:
        yield scheduler
    finally:
        await scheduler.stop()
