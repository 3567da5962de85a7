"""The check-back job: APScheduler runs a round every check_scan_interval_seconds.

How it runs (one at a time per node, stopped within bounds) is
`core.periodic.PeriodicRound`; here is what a round logs.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from coordinator.core.configs import SchedulerConfig
from coordinator.core.periodic import PeriodicRound
from coordinator.domain.checkback import RoundResult

log = logging.getLogger(__name__)

JOB_ID = "check-back-round"
# How long a stopping server lets the running round finish. A round stops
# after the batch it is at when the server stops, but pushes in that batch
# may each take check_push_timeout_seconds.
ROUND_FINISH_SECONDS = 30.0


class CheckScheduler(PeriodicRound[RoundResult]):
    def __init__(
        self, run_round: Callable[[], Awaitable[RoundResult]], interval_seconds: float
    ) -> None:
        # A round stops after the batch it is at when the server stops; a
        # round cut short loses nothing: an uncommitted claim rolls back, a
        # committed one only waits for the message's next check.
        super().__init__(
            job_id=JOB_ID,
            what="check-back round",
            log=log,
            run_round=run_round,
            interval_seconds=interval_seconds,
            finish_seconds=ROUND_FINISH_SECONDS,
            report=_log_round,
        )


def _log_round(result: RoundResult) -> None:
    if not result.claimed:  # a round that found nothing due says nothing
        return
    counts = {
        "checked": len(result.checked),
        "waiting": len(result.waiting),
        "discarded": len(result.discarded),
        "expired": len(result.expired),
        "pushing": result.handed_to_push,
    }
    log.info(
        "check-back round: %(checked)d checked, %(waiting)d waiting for a producer, "
        "%(discarded)d discarded, %(expired)d expired, %(pushing)d pushes started",
        counts,
        extra=counts,  # the same figures as fields of a JSON line
    )


@contextlib.asynccontextmanager
async def running_check_scheduler(
    run_round: Callable[[], Awaitable[RoundResult]], config: SchedulerConfig
) -> AsyncIterator[CheckScheduler | None]:
    """The check-back job for the lifetime of a served app (unless disabled)."""
    if not config.check_scheduler_enabled:
        yield None
        return
    scheduler = CheckScheduler(run_round, config.check_scan_interval_seconds)
    scheduler.start()
    try:
        yield scheduler
    finally:
        await scheduler.stop()
