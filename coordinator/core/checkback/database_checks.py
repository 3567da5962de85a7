"""Database check-backs run: the group's barrier asked (`database.py`), its answer applied."""

from __future__ import annotations

import asyncio
import logging

from coordinator.core.checkback import database, push
from coordinator.core.checkback.ending import claim_fields, end_from_check
from coordinator.core.checkback.sources import secret_box
from coordinator.core.configs import CheckBackConfig
from coordinator.core.context import CoreContext, EndTransaction
from coordinator.domain.check_sources import BarrierAnswer
from coordinator.domain.checkback import ClaimedCheck, RoundResult
from coordinator.domain.states import DispatchMode, Resolution

log = logging.getLogger(__name__)


class DatabaseChecks:
    """Runs a claimed database check (a task of the round's dispatcher) and applies its answer."""

    def __init__(self, context: CoreContext, config: CheckBackConfig, end: EndTransaction) -> None:
        self._context = context
        self._config = config
        self._end = end  # the barrier's answer ends the message as a push's would
        self._secrets = secret_box(config)  # check sources' passwords

    async def run(self, claimed: ClaimedCheck, result: RoundResult) -> None:
        """One database check: the barrier's answer ends the message as a push's would."""
        timeout = self._config.check_push_timeout_seconds
        async with self._context.pool.connection() as conn:
            if not await push.start(conn, claimed):
                return  # resolved, or checked again, while it waited for its slot
            source = await database.source(conn, claimed.producer_group)
        try:
            answer = await database.ask(self._secrets, source, claimed.transaction_id, timeout)
        except asyncio.CancelledError:
            stopped = BarrierAnswer(None, "the coordinator stopped before the database answered")
            await asyncio.shield(self._finish_database_check(claimed, stopped))
            raise
        except Exception as error:  # a producer's database must never break the round
            answer = BarrierAnswer(None, f"{type(error).__name__}: {error}"[:500])
        await self._finish_database_check(claimed, answer)
        failed = answer.committed is None
        outcome = "failed" if failed else "committed" if answer.committed else "rolled_back"
        self._context.meter.database_check_back(outcome)
        if failed:
            result.database_failures += 1
            log.info(
                "database check-back of transaction %s failed: %s",
                claimed.transaction_id,
                answer.detail,
                extra=claim_fields(claimed),
            )
            return
        result.asked_database += 1
        self._context.meter.check_backs_dispatched(DispatchMode.DATABASE)
        resolution = Resolution.COMMIT if answer.committed else Resolution.ROLLBACK
        await end_from_check(self._end, claimed, resolution)

    async def _finish_database_check(self, claimed: ClaimedCheck, answer: BarrierAnswer) -> None:
        delivered = answer.committed is not None
        async with self._context.pool.connection() as conn:
            await push.finish(conn, claimed, push.PushOutcome(delivered, detail=answer.detail))
            await database.record(conn, claimed.producer_group, answer)
