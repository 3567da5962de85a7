"""Check-back rounds: claim the due half messages, batch by batch, and dispatch their checks.

A half message nobody ended is due for a check-back at `next_check_at`. A
round claims due messages in batches (`claim_due_checks`: SKIP LOCKED, next
check time and check count advanced in the same transaction), then
dispatches: pulled check requests are already in `check_requests` and their
instances' long polls are woken by NOTIFY (`pull.py`); pushed ones are
POSTed by tasks of their own (`dispatcher.py`, `push_checks.py`), so the
round does not wait for answers and a slow check URL delays no other
producer's checks. Database checks (a group's check source,
`database_checks.py`) run as tasks of the same dispatcher.

Any number of coordinator nodes run rounds on one database; each due
message goes to exactly one of them per round. The scheduler
(`scheduler.py`) runs `run_round` every `check_scan_interval_seconds`;
tests call it directly.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any

from coordinator.core.checkback import database, registry
from coordinator.core.checkback.database_checks import DatabaseChecks
from coordinator.core.checkback.dispatcher import PushDispatcher
from coordinator.core.checkback.push_checks import PushChecks
from coordinator.core.configs import CheckBackConfig
from coordinator.core.context import CoreContext, EndTransaction
from coordinator.db.queries import fetch_all
from coordinator.domain.checkback import CheckRequest, ClaimAction, ClaimedCheck, RoundResult
from coordinator.domain.states import DispatchMode, MessageState, Source
from coordinator.metrics import Meter

log = logging.getLogger(__name__)

# A round drains a backlog batch by batch, but not forever: the scheduler
# starts the next round soon anyway.
MAX_BATCHES_PER_ROUND = 100
# How long a closing node lets its pushes in flight run (each ends within
# check_push_timeout_seconds anyway); the same bound as a running round's.
PUSHES_FINISH_SECONDS = 30.0


class CheckRounds:
    """The rounds, and the pushes and database checks they leave running."""

    def __init__(self, context: CoreContext, config: CheckBackConfig, end: EndTransaction) -> None:
        self._context = context
        self._config = config
        self._pushes = PushDispatcher(config.max_inflight_dispatches)
        self._push_checks = PushChecks(context, config, end)
        self._database_checks = DatabaseChecks(context, config, end)
        context.pool.before_close(self.close)

    async def run_round(self) -> RoundResult:
        """Claim every due half message (batch by batch) and dispatch its check.

        Returns once the pushes are started; `settle()` waits for their answers.
        """
        started = time.perf_counter()
        result = RoundResult()
        async with self._context.pool.connection() as conn:
            await registry.forget_stale(conn, self._config)
        for _ in range(MAX_BATCHES_PER_ROUND):
            claimed = await self.claim()
            result.add(claimed)
            self._hand_off(claimed, result)  # the pushes run on; the round does not wait
            if len(claimed) < self._config.check_batch_size:
                break
            if self._context.stopping.is_set():
                break  # the rest stays due: the next round, on any node, takes it
        self._context.meter.check_round(time.perf_counter() - started)
        return result

    async def claim(self) -> list[ClaimedCheck]:
        """Claim one batch of due messages; committed when this returns."""
        config = self._config
        retention_seconds = config.retention_hours * 3600.0
        async with self._context.pool.connection() as conn:
            rows = await fetch_all(
                conn,
                "claim_due_checks",
                {
                    "batch_size": config.check_batch_size,
                    "producer_ttl_seconds": config.producer_ttl_seconds,
                    "retention_seconds": retention_seconds,
                    "check_max": config.check_max,
                    "pushes_in_flight": self._pushes.in_flight(),
                    "check_interval_seconds": config.check_interval_seconds,
                    "backoff": config.check_backoff,
                    "backoff_factor": config.check_backoff_factor,
                    "backoff_max_seconds": config.check_backoff_max_seconds,
                    "expiry_detail": (
                        f"still prepared after the retention of {config.retention_hours:g} hours"
                    ),
                },
            )
        claimed = [_claimed(row) for row in rows]
        self._count_claimed(claimed)
        _report_ended(rows, self._context.meter)
        return claimed

    async def dispatch(
        self, claimed: list[ClaimedCheck], result: RoundResult | None = None
    ) -> RoundResult:
        """Push the claimed push requests and wait for the answers (pulled ones wait for polls)."""
        result = result if result is not None else RoundResult()
        await asyncio.gather(*self._hand_off(claimed, result))
        return result

    async def settle(self) -> None:
        """Wait until every push handed off so far is answered, failed or timed out."""
        await self._pushes.settle()

    async def close(self) -> None:
        """Let the pushes in flight finish (each within its timeout), then stop pushing."""
        timeout = self._config.check_push_timeout_seconds
        await self._pushes.close(finish_seconds=min(timeout + 1.0, PUSHES_FINISH_SECONDS))
        await self._push_checks.close()

    def _hand_off(
        self, claimed: list[ClaimedCheck], result: RoundResult
    ) -> list[asyncio.Task[None]]:
        """Start a push for each claimed push request; its outcome is counted in `result`."""
        tasks = []
        for check in claimed:
            if check.via is DispatchMode.PUSH:
                assert check.check_url is not None
                slot, run = check.check_url, self._push_checks.run
            elif check.via is DispatchMode.DATABASE:
                slot, run = database.slot_key(check.producer_group), self._database_checks.run
            else:
                continue
            task = self._pushes.submit(check.offset, slot, functools.partial(run, check, result))
            if task is not None:
                result.handed_to_push += 1
                tasks.append(task)
        return tasks

    def _count_claimed(self, claimed: list[ClaimedCheck]) -> None:
        actions = [c.action for c in claimed]
        self._context.meter.check_backs_claimed(actions.count(ClaimAction.CHECK))
        self._context.meter.check_backs_without_producer(actions.count(ClaimAction.WAIT))


_ENDED_BY = {
    ClaimAction.DISCARD.value: (MessageState.DISCARDED, Source.DISCARD),
    ClaimAction.EXPIRE.value: (MessageState.EXPIRED, Source.EXPIRY),
}


def _report_ended(rows: list[dict[str, Any]], meter: Meter) -> None:
    """Count, time and log the half messages a claim discarded or expired (committed by
    then)."""
    for row in rows:
        ended = _ENDED_BY.get(row["action"])
        if ended is None:
            continue
        state, source = ended
        meter.resolved(state, source, row["age_seconds"])
        log.info(
            "transaction %s %s after %d check-backs, %.0f s after its prepare",
            row["transaction_id"],
            state.value,
            row["check_count"],
            row["age_seconds"],
            extra={
                "transaction_id": row["transaction_id"],
                "message_id": row["message_id"],
                "offset": row["message_offset"],
                "producer_group": row["producer_group"],
                "topic": row["topic"],
            },
        )


def _claimed(row: dict[str, Any]) -> ClaimedCheck:
    via = DispatchMode(row["via"]) if row["via"] else None
    return ClaimedCheck(
        offset=row["message_offset"],
        transaction_id=row["transaction_id"],
        producer_group=row["producer_group"],
        action=ClaimAction(row["action"]),
        check_count=row["check_count"],
        instance_id=row["instance_id"],
        check_url=row["check_url"],
        via=via,
        request=CheckRequest.from_row(row) if via is DispatchMode.PUSH else None,
        message_id=row["message_id"],
    )
