"""LISTEN/NOTIFY for long polls: one listening connection per process.

Waiters subscribe to a channel (optionally one payload, e.g. a group name)
*before* they look for work, then wait; a notification that arrives between
the look and the wait sets their event, so no wake-up is lost. NOTIFY is
transactional, so a waiter wakes only once the change is committed. If the
listening connection breaks, every waiter is woken (to poll) while it
reconnects; polling with a short timeout stays the fallback either way.

A listening connection only waits, so it would not notice a server that
stopped answering (frozen, cut off) or that is no longer the primary after
a failover: every `check_seconds` without a notification it asks the server,
within a bound, whether it is still there and still the primary, and
reconnects (through the URL, to the new primary) when it is not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import psycopg
from psycopg.rows import dict_row

from coordinator.db.connections import connection_defaults
from coordinator.db.deadlines import severed_after
from coordinator.db.queries import fetch_one

log = logging.getLogger(__name__)

# The channels the coordinator's own SQL notifies on (pg_notify in queries and
# triggers); the payload names the group whose waiters should wake.
CHECKS_CHANNEL = "coordinator_checks"
DELIVERIES_CHANNEL = "coordinator_deliveries"
TOKENS_CHANNEL = "coordinator_tokens"  # a token was created or revoked
CHANNELS = (CHECKS_CHANNEL, DELIVERIES_CHANNEL, TOKENS_CHANNEL)
# How often an idle listening connection asks whether its server is still the
# primary, and how long the answer may take.
CHECK_SECONDS = 5.0
ANSWER_SECONDS = 3.0


class NotThePrimary(Exception):
    """The listening connection's server is a standby now (it was demoted)."""


class Subscription:
    def __init__(self, channel: str, payload: str | None) -> None:
        self.channel = channel
        self.payload = payload
        self._event = asyncio.Event()

    def _notify(self, payload: str) -> None:
        if self.payload is None or self.payload == payload:
            self._event.set()

    def wake(self) -> None:
        self._event.set()

    async def wait(self, timeout: float) -> bool:
        """Wait for a notification (True) or the timeout (False); then re-arm."""
        try:
            # Not wait_for: up to Python 3.11 it swallows a cancellation that
            # comes as the event is set, and the waiter's task would run on.
            async with asyncio.timeout(timeout):
                await self._event.wait()
            return True
        except TimeoutError:
            return False
        finally:
            self._event.clear()


class Notifier:
    def __init__(
        self,
        database_url: str,
        channels: Iterable[str],
        reconnect_delay: float = 1.0,
        on_connection_lost: Callable[[], None] | None = None,
        check_seconds: float = CHECK_SECONDS,
    ) -> None:
        self.database_url = database_url
        self.channels = tuple(channels)
        self.reconnect_delay = reconnect_delay
        self.check_seconds = check_seconds
        # The listener is the first to see Postgres go: its connection is
        # always waiting on the server. The pool's idle connections broke
        # with it, unnoticed until used; this tells the pool.
        self.on_connection_lost = on_connection_lost
        self._subscriptions: dict[str, set[Subscription]] = defaultdict(set)
        self._task: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="coordinator-notifier")
            # Do not block start-up on the database; waiters poll meanwhile.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._listening.wait(), timeout=5)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.wake_all()

    @contextlib.asynccontextmanager
    async def subscribe(
        self, channel: str, payload: str | None = None
    ) -> AsyncIterator[Subscription]:
        if channel not in self.channels:
            raise ValueError(f"not listening on channel {channel!r}")
        subscription = Subscription(channel, payload)
        self._subscriptions[channel].add(subscription)
        try:
            yield subscription
        finally:
            self._subscriptions[channel].discard(subscription)

    def wake_all(self) -> None:
        """Wake every waiter now, to look again (and see why it was woken)."""
        for subscriptions in self._subscriptions.values():
            for subscription in subscriptions:
                subscription.wake()

    async def _run(self) -> None:
        # libpq parameters by keyword (Any: connect's other keywords are typed)
        defaults: dict[str, Any] = connection_defaults(self.database_url)
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.database_url,
                    autocommit=True,
                    row_factory=dict_row,
                    connect_timeout=int(ANSWER_SECONDS),
                    **defaults,
                ) as conn:
                    for channel in self.channels:
                        await conn.execute(f'LISTEN "{channel}"')
                    self._listening.set()
                    # Anything committed while we were not listening: poll now.
                    self.wake_all()
                    while True:
                        async for notification in conn.notifies(timeout=self.check_seconds):
                            for subscription in tuple(self._subscriptions[notification.channel]):
                                subscription._notify(notification.payload)
                        await self._check(conn)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the connection broke: reconnect, waiters poll
                log.warning("notification listener lost its connection: %s", error)
                if self.on_connection_lost is not None:
                    self.on_connection_lost()
            self._listening.clear()
            self.wake_all()
            await asyncio.sleep(self.reconnect_delay)

    @staticmethod
    async def _check(conn: psycopg.AsyncConnection[Any]) -> None:
        """Raise if the server does not answer in time, or answers as a standby."""
        with severed_after(conn, ANSWER_SECONDS):
            row = await fetch_one(conn, "listener_check")
        if row is not None and row["in_recovery"]:
            raise NotThePrimary("its server is a standby now")
