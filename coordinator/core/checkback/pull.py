"""Pulled check-backs: a producer instance's long poll for its pending check requests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from coordinator.core.checkback import registry
from coordinator.core.configs import CheckBackConfig
from coordinator.core.context import CoreContext
from coordinator.db.notifier import CHECKS_CHANNEL, Subscription
from coordinator.db.queries import fetch_all
from coordinator.domain.checkback import CheckRequest
from coordinator.domain.long_polls import LONGEST_POLL_SECONDS
from coordinator.domain.rules import check_poll
from coordinator.domain.states import DispatchMode


class CheckPolls:
    """Hands a round's pulled check requests to the instances that poll for them."""

    def __init__(self, context: CoreContext, config: CheckBackConfig) -> None:
        self._context = context
        self._config = config

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
        return [CheckRequest.from_row(row) for row in rows]
