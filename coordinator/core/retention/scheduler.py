"""The retention job: APScheduler runs a round every retention_interval_seconds.

Beside the check-back job, in every serving node. `max_instances=1` and
`coalesce=True`: a round that outlasts the interval is never joined by a
second one on the same node; other nodes run their own (SKIP LOCKED splits
the rows).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from coordinator.core.retention.config import RetentionConfig
from coordinator.domain.errors import DatabaseUnavailable
from coordinator.domain.retention import RetentionResult

log = logging.getLogger(__name__)

JOB_ID = "retention-round"
# A round stops between batches; each batch is one short statement.
ROUND_FINISH_SECONDS = 10.0


class RetentionScheduler:
    def __init__(
        self, run_round: Callable[[], Awaitable[RetentionResult]], interval_seconds: float
    ) -> None:
        self._run_round_once = run_round
        self._interval_seconds = interval_seconds
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
            misfire_grace_time=max(1, int(interval)),
            next_run_time=datetime.now(UTC),
        )
        self._scheduler.start()

    async def stop(self, finish_seconds: float = ROUND_FINISH_SECONDS) -> None:
        self._scheduler.pause()
        running = self._running
        if running is not None and not running.done():
            try:
                async with asyncio.timeout(finish_seconds):
                    await asyncio.shield(running)
            except TimeoutError:
                # Each batch commits alone: a round cut short loses nothing.
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running
        self._scheduler.shutdown(wait=False)

    async def _run_round(self) -> None:
        self._running = asyncio.current_task()
        try:
            await self._run_round_once()
        except asyncio.CancelledError:
            return  # stopping
        except DatabaseUnavailable as error:
            log.warning("retention round skipped: %s", error.message)
        except Exception:  # try again next round, with the evidence
            log.exception("retention round failed")
        finally:
            self._running = None


@contextlib.asynccontextmanager
async def running_retention(
    run_round: Callable[[], Awaitable[RetentionResult]], config: RetentionConfig
) -> AsyncIterator[RetentionScheduler | None]:
    """The retention job for the lifetime of a served node (unless disabled)."""
    if not config.enabled:
        yield None
        return
    scheduler = RetentionScheduler(run_round, config.interval_seconds)
    scheduler.start()
    try:
        yield scheduler
    finally:
        await scheduler.stop()
