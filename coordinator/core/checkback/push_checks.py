"""Pushed check-backs: one claimed push request POSTed to its check URL, its outcome recorded."""

from __future__ import annotations

import asyncio
import logging

import httpx

from coordinator.core.checkback import push
from coordinator.core.checkback.ending import claim_fields, end_from_check
from coordinator.core.configs import CheckBackConfig
from coordinator.core.context import CoreContext, EndTransaction
from coordinator.domain.checkback import ClaimedCheck, RoundResult
from coordinator.domain.states import DispatchMode, Resolution

log = logging.getLogger(__name__)


class PushChecks:
    """Runs a claimed push request (a task of the round's dispatcher) and applies its answer."""

    def __init__(self, context: CoreContext, config: CheckBackConfig, end: EndTransaction) -> None:
        self._context = context
        self._config = config
        self._end = end  # applies answers that pushed check requests carry
        self._client: httpx.AsyncClient | None = None  # for pushes, made at the first

    async def run(self, claimed: ClaimedCheck, result: RoundResult) -> None:
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
            await end_from_check(self._end, claimed, outcome.resolution)

    async def close(self) -> None:
        """Close the HTTP client (once no push runs any more)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

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
                extra=claim_fields(claimed),
            )
