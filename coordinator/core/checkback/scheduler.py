"""The check-back job: APScheduler runs a round every check_scan_interval_seconds.

`max_instances=1` and `coalesce=True`: a round that outlasts the interval is
never joined by a second one on the same node, and missed runs collapse into
one. Other nodes run their own job; SKIP LOCKED splits the due messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from coordinator.core.configs import SchedulerConfig
from coordinator.domain.checkback import RoundResult
from coordinator.domain.errors import DatabaseUnavailable

log = logging.getLogger(__name__)

JOB_ID = "check-back-round"
# How long a stopping server lets the running round finish. A round stops
# after the batch it is at when the server stops, but pushes in that batch
# may each take check_push_timeout_seconds.
ROUND_FINISH_SECONDS = 30.0


class CheckScheduler:
    def __init__(
        self, run_round: Callable[[], Awaitable[RoundResult]], interval_seconds: float
    ) -> None:
        self._run_round_once = run_round
        self._interval_seconds = interval_seconds
        # Skipping a run while the previous round is still going is the point of
        # max_instances=1, not a problem: keep APScheduler from warning about it.
        quiet = log.getChild("apscheduler")
        quiet.setLevel(logging.ERROR)
        self._scheduler = AsyncIOScheduler(timezone=UTC, logger=quiet)
        self._running: asyncio.Task[object] | None = None

    def start(self) -> None:
        interval = self._interval_seconds
        self._scheduler.add_job(
            self._run_round,
            "interval",
            seconds=interval,
            id=JOB_ID,
            max_instances=1,
            coalesce=True,
            # a round late by more than one interval is skipped: the next is due anyway
            misfire_grace_time=max(1, int(interval)),
            next_run_time=datetime.now(UTC),
        )
        self._scheduler.start()

    async def stop(self, finish_seconds: float = ROUND_FINISH_SECONDS) -> None:
        """No new round; the one running finishes (its batch, see run_round), within bounds."""
        # Paused, not shut down yet: APScheduler's shutdown cancels the jobs
        # that run.
        self._scheduler.pause()
        running = self._running
        if running is not None and not running.done():
            try:
                async with asyncio.timeout(finish_seconds):
                    await asyncio.shield(running)
            except TimeoutError:
                # A round cut short loses nothing: an uncommitted claim rolls
                # back, a committed one only waits for the message's next check.
                log.warning("check-back round still running after %g s: cut short", finish_seconds)
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running
        self._scheduler.shutdown(wait=False)

    async def _run_round(self) -> None:
        self._running = asyncio.current_task()
        try:
            result = await self._run_round_once()
            if result.claimed:  # a round that found nothing due says nothing
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
        except asyncio.CancelledError:
            return  # stopping
        except DatabaseUnavailable as error:
            # Expected while Postgres restarts: one line per round, no
            # traceback. Due rows stay due; the next round takes them.
            log.warning("check-back round skipped: %s", error.message)
        except Exception:  # anything else: try again next round, with the evidence
            log.exception("check-back round failed")
        finally:
            self._running = None


@contextlib.asynccontextmanager
async def running_check_scheduler(
    run_round: Callable[[], Awaitable[RoundResult]], config: SchedulerConfig
) -> AsyncIterator[CheckScheduler | None]:
    """The check-back job for the lifetime of a served app (unless disabled)."""
    if not config.enabled:
        yield None
        return
    scheduler = CheckScheduler(run_round, config.scan_interval_seconds)
    scheduler.start()
    try:
        yield scheduler
    finally:
        await scheduler.stop()
