"""The check-back engine (RocketMQ's 回查, done on Postgres).

Long on purpose: the round, its three dispatches (pull, push, the group's
own database) and the long poll share the claim and the dispatcher; each
dispatch's work is in a module of its own (push.py, database.py).

A half message nobody ended is due for a check-back at `next_check_at`. A
round claims due messages in batches (`claim_due_checks`: SKIP LOCKED, next
check time and check count advanced in the same transaction), then
dispatches: pulled check requests are already in `check_requests` and their
instances' long polls are woken by NOTIFY; pushed ones are POSTed by tasks
of their own (`dispatcher.py`), so the round does not wait for answers and a
slow check URL delays no other producer's checks. Database checks (a group's
check source, `database.py`) run as tasks of the same dispatcher.

Any number of coordinator nodes run rounds on one database; each due
message goes to exactly one of them per round. The scheduler
(`scheduler.py`) runs `run_round` every `check_scan_interval_seconds`;
tests call it directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from coordinator.core.checkback import database, operator, push, registry
from coordinator.core.checkback.dispatcher import PushDispatcher
from coordinator.core.checkback.sources import secret_box
from coordinator.core.configs import CheckBackConfig
from coordinator.core.context import CoreContext, EndTransaction
from coordinator.db.notifier import CHECKS_CHANNEL, Subscription
from coordinator.db.queries import fetch_all
from coordinator.domain.check_sources import BarrierAnswer
from coordinator.domain.checkback import (
    CheckRequest,
    ClaimAction,
    ClaimedCheck,
    OperatorResult,
    Producer,
    RoundResult,
)
from coordinator.domain.errors import CoordinatorError
from coordinator.domain.long_polls import LONGEST_POLL_SECONDS
from coordinator.domain.messages import EndRequest
from coordinator.domain.rules import check_poll
from coordinator.domain.states import DispatchMode, MessageState, Resolution, Source
from coordinator.metrics import Meter

log = logging.getLogger(__name__)

# A round drains a backlog batch by batch, but not forever: the scheduler
# starts the next round soon anyway.
MAX_BATCHES_PER_ROUND = 100
# How long a closing node lets its pushes in flight run (each ends within
# check_push_timeout_seconds anyway); the same bound as a running round's.
PUSHES_FINISH_SECONDS = 30.0


class CheckBack:
    def __init__(self, context: CoreContext, config: CheckBackConfig, end: EndTransaction) -> None:
        self._context = context
        self._config = config
        self._end = end  # applies answers that pushed check requests carry
        self._pushes = PushDispatcher(config.max_inflight_dispatches)
        self._client: httpx.AsyncClient | None = None  # for pushes, made at the first
        self._secrets = secret_box(config)  # check sources' passwords
        context.pool.before_close(self.close)

    # --- producer registry --------------------------------------------------
    async def heartbeat(
        self, producer_group: str, instance_id: str, check_url: str | None = None
    ) -> Producer:
        """Register an instance or record that it is alive (with its check URL, if push)."""
        async with self._context.pool.connection() as conn:
            return await registry.heartbeat(
                conn, self._config, producer_group, instance_id, check_url
            )

    async def leave(self, producer_group: str, instance_id: str) -> bool:
        """Remove an instance at clean shutdown; False if it was not registered."""
        async with self._context.pool.connection() as conn:
            return await registry.remove(conn, producer_group, instance_id)

    async def producers(self, producer_group: str | None = None) -> list[Producer]:
        async with self._context.pool.connection() as conn:
            return await registry.list_producers(conn, self._config, producer_group)

    # --- the round ------------------------------------------------------------
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
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _hand_off(
        self, claimed: list[ClaimedCheck], result: RoundResult
    ) -> list[asyncio.Task[None]]:
        """Start a push for each claimed push request; its outcome is counted in `result`."""
        tasks = []
        for check in claimed:
            if check.via is DispatchMode.PUSH:
                assert check.check_url is not None
                slot, run = check.check_url, self._push_one
            elif check.via is DispatchMode.DATABASE:
                slot, run = database.slot_key(check.producer_group), self._ask_database
            else:
                continue
            task = self._pushes.submit(check.offset, slot, functools.partial(run, check, result))
            if task is not None:
                result.handed_to_push += 1
                tasks.append(task)
        return tasks

    async def _ask_database(self, claimed: ClaimedCheck, result: RoundResult) -> None:
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
                extra=_claim_fields(claimed),
            )
            return
        result.asked_database += 1
        self._context.meter.check_backs_dispatched(DispatchMode.DATABASE)
        resolution = Resolution.COMMIT if answer.committed else Resolution.ROLLBACK
        await self._end_from_push(claimed, resolution)

    async def _push_one(self, claimed: ClaimedCheck, result: RoundResult) -> None:
        assert claimed.request is not None and claimed.check_url is not None
        async with self._context.pool.connection() as conn:
            if not await push.start(conn, claimed):
                return  # resolved, or checked again, while it waited for its slot
        try:
            outcome = await push.push(
                self._http_client(),
                claimed.check_url,
                claimed.request,
                self._config.check_push_secret,
                max_answer_bytes=self._config.max_check_answer_bytes,
                timeout_seconds=self._config.check_push_timeout_seconds,
            )
        except asyncio.CancelledError:
            # The node stops: the request records why it went unanswered.
            stopped = push.PushOutcome(False, detail="the coordinator stopped before the answer")
            await asyncio.shield(self._finish_push(claimed, stopped))
            raise
        except Exception as error:  # a producer's endpoint must never break the round
            outcome = push.PushOutcome(False, detail=f"{type(error).__name__}: {error}"[:500])
        await self._finish_push(claimed, outcome)
        if not outcome.delivered:
            result.push_failures += 1
            return
        result.pushed += 1
        self._context.meter.check_backs_dispatched(DispatchMode.PUSH)
        if outcome.resolution is not None:
            result.resolved_by_push += 1
            await self._end_from_push(claimed, outcome.resolution)

    def _http_client(self) -> httpx.AsyncClient:
        if self._client is None:
            config = self._config
            self._client = httpx.AsyncClient(
                # push() bounds the whole push; httpx's per-step bound is a net
                timeout=config.check_push_timeout_seconds + 1.0,
                # the dispatcher bounds the pushes: never make one wait for a connection
                limits=httpx.Limits(max_connections=config.max_inflight_dispatches),
            )
        return self._client

    async def _finish_push(self, claimed: ClaimedCheck, outcome: push.PushOutcome) -> None:
        async with self._context.pool.connection() as conn:
            await push.finish(conn, claimed, outcome)
        if outcome.answered_unknown:  # commit and rollback are counted where they end it
            self._context.meter.check_back_answered(Resolution.UNKNOWN)
        if not outcome.delivered:
            self._context.meter.check_back_push_failed()
            log.info(
                "check-back of transaction %s to %s failed: %s",
                claimed.transaction_id,
                claimed.check_url,
                outcome.detail,
                extra=_claim_fields(claimed),
            )

    async def _finish_database_check(self, claimed: ClaimedCheck, answer: BarrierAnswer) -> None:
        delivered = answer.committed is not None
        async with self._context.pool.connection() as conn:
            await push.finish(conn, claimed, push.PushOutcome(delivered, detail=answer.detail))
            await database.record(conn, claimed.producer_group, answer)

    async def _end_from_push(self, claimed: ClaimedCheck, resolution: Resolution) -> None:
        try:
            await self._end(
                EndRequest(
                    transaction_id=claimed.transaction_id,
                    producer_group=claimed.producer_group,
                    resolution=resolution,
                    from_check=True,
                    message_id=claimed.message_id,
                )
            )
        except CoordinatorError as error:
            # e.g. resolved the other way meanwhile: the first resolution stands
            log.info(
                "check-back answer %s for transaction %s not applied: %s",
                resolution.value,
                claimed.transaction_id,
                error.message,
                extra=_claim_fields(claimed),
            )

    def _count_claimed(self, claimed: list[ClaimedCheck]) -> None:
        actions = [c.action for c in claimed]
        self._context.meter.check_backs_claimed(actions.count(ClaimAction.CHECK))
        self._context.meter.check_backs_without_producer(actions.count(ClaimAction.WAIT))

    # --- pull -----------------------------------------------------------------
    async def poll(
        self,
        producer_group: str,
        instance_id: str,
        *,
        wait_seconds: float = 0.0,
        max_requests: int = 32,
    ) -> list[CheckRequest]:
        """Long poll: this instance's pending check requests, waiting up to wait_seconds.

        Polling also counts as being heard from (the instance stays live).
        """
        config = self._config
        # The server may hold long polls for less than the protocol allows.
        check_poll(
            wait_seconds,
            max_requests,
            high=min(LONGEST_POLL_SECONDS, config.max_long_poll_seconds),
        )
        async with self._context.pool.connection() as conn:
            await registry.heartbeat(
                conn, config, producer_group, instance_id, None, keep_check_url=True
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_seconds
        async with self._wake_ups(producer_group) as wake_up:
            while True:
                taken = await self._take(producer_group, instance_id, max_requests)
                remaining = deadline - loop.time()
                if taken or remaining <= 0 or self._context.stopping.is_set():
                    return taken
                pause = min(remaining, config.check_poll_fallback_seconds)
                if wake_up is None:
                    await asyncio.sleep(pause)
                else:
                    await wake_up.wait(pause)

    @contextlib.asynccontextmanager
    async def _wake_ups(self, producer_group: str) -> AsyncIterator[Subscription | None]:
        notifier = self._context.notifier
        if notifier is None:  # no LISTEN connection (CLI, plain cores): poll
            yield None
            return
        async with notifier.subscribe(CHECKS_CHANNEL, producer_group) as subscription:
            yield subscription

    async def _take(self, producer_group: str, instance_id: str, limit: int) -> list[CheckRequest]:
        async with self._context.pool.connection() as conn:
            rows = await fetch_all(
                conn,
                "take_check_requests",
                {"producer_group": producer_group, "instance_id": instance_id, "limit": limit},
            )
        self._context.meter.check_backs_dispatched(DispatchMode.PULL, len(rows))
        return [_request(row) for row in rows]

    # --- operator -------------------------------------------------------------
    async def recheck(self, offset: int) -> OperatorResult:
        """Re-arm a discarded message: prepared, check count reset, checked back now."""
        async with self._context.pool.connection() as conn:
            return await operator.recheck(conn, self._config, offset)

    async def resolve(self, offset: int, resolution: Resolution) -> OperatorResult:
        """Commit or roll back a prepared or discarded message by hand (source operator)."""
        async with self._context.pool.connection() as conn:
            result = await operator.resolve(conn, offset, resolution)
        if result.changed:
            self._context.meter.resolved(result.state, Source.OPERATOR, None)
        return result


def _request(row: dict[str, Any]) -> CheckRequest:
    return CheckRequest.from_row(row)


def _claim_fields(claimed: ClaimedCheck) -> dict[str, Any]:
    """The ids a log line about a claimed message carries (logs.py writes them as fields)."""
    return {
        "transaction_id": claimed.transaction_id,
        "message_id": claimed.request.message_id if claimed.request is not None else None,
        "offset": claimed.offset,
        "producer_group": claimed.producer_group,
        "check_count": claimed.check_count,
    }


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
        request=_request(row) if via is DispatchMode.PUSH else None,
        message_id=row["message_id"],
    )
