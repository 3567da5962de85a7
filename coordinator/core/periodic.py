"""A round run every few seconds by APScheduler, in every serving node.

The check-back job and the retention job are both this: `max_instances=1`
and `coalesce=True`, so a round that outlasts the interval is never joined
by a second one on the same node and missed runs collapse into one; other
nodes run their own (SKIP LOCKED splits the rows). Stopping lets the running
round finish, within bounds; a round that fails is logged and the next one
tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Generic, TypeVar

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from coordinator.domain.errors import DatabaseUnavailable

R = TypeVar("R")


class PeriodicRound(Generic[R]):
    """Runs `run_round` every `interval_seconds`; `report` is told each result."""

    def __init__(
        self,
        *,
        job_id: str,
        what: str,
        log: logging.Logger,
        run_round: Callable[[], Awaitable[R]],
        interval_seconds: float,
        finish_seconds: float,
        report: Callable[[R], None] | None = None,
    ) -> None:
        self._job_id = job_id
        self._what = what  # "check-back round": the subject of its log lines
        self._log = log
        self._run_round_once = run_round
        self._interval_seconds = interval_seconds
        self._finish_seconds = finish_seconds
        self._report = report
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
            id=self._job_id,
            max_instances=1,
            coalesce=True,
            # a round late by more than one interval is skipped: the next is due anyway
            misfire_grace_time=max(1, int(interval)),
            next_run_time=datetime.now(UTC),
        )
        self._scheduler.start()

    async def stop(self, finish_seconds: float | None = None) -> None:
        """No new round; the one running finishes, within `finish_seconds`."""
        bound = self._finish_seconds if finish_seconds is None else finish_seconds
        # Paused, not shut down yet: APScheduler's shutdown cancels the jobs
        # that run.
        self._scheduler.pause()
        running = self._running
        if running is not None and not running.done():
            try:
                async with asyncio.timeout(bound):
                    await asyncio.shield(running)
            except TimeoutError:
                self._log.warning("%s still running after %g s: cut short", self._what, bound)
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running
        self._scheduler.shutdown(wait=False)

    async def _run_round(self) -> None:
        self._running = asyncio.current_task()
        try:
            result = await self._run_round_once()
            if self._report is not None:
                self._report(result)
        except asyncio.CancelledError:
            return  # stopping
        except DatabaseUnavailable as error:
            # Expected while Postgres restarts: one line per round, no
            # traceback. The next round takes what this one left.
            self._log.warning("%s skipped: %s", self._what, error.message)
        except Exception:  # anything else: try again next round, with the evidence
            self._log.exception("%s failed", self._what)
        finally:
            self._running = None
