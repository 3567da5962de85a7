"""The Coordinator: the one object every interface (HTTP, CLI) calls, composing the services."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from psycopg import AsyncConnection

from coordinator import metrics
from coordinator.config import Settings
from coordinator.core import ending, inspection, producing
from coordinator.core.checkback import CheckBack
from coordinator.core.context import CoreContext
from coordinator.core.delivery import Delivery
from coordinator.core.group_commit import GroupCommitter, Item, Result, RunBatch
from coordinator.core.ids import new_message_id
from coordinator.core.overview import OverviewReader
from coordinator.core.tokens import Tokens
from coordinator.db.notifier import CHANNELS, Notifier
from coordinator.db.pool import CoordinatorPool, open_pool
from coordinator.db.queries import execute
from coordinator.domain.errors import CoordinatorError
from coordinator.domain.messages import (
    EndRequest,
    EndResult,
    MessageRecord,
    NewMessage,
    SendResult,
    Status,
)
from coordinator.domain.states import Resolution


class Coordinator:
    def __init__(
        self, pool: CoordinatorPool, settings: Settings, notifier: Notifier | None = None
    ) -> None:
        self.pool = pool
        self.settings = settings
        # Long polls (check requests, receives) wait on the notifier; without
        # one (CLI commands) they fall back to polling.
        self.notifier = notifier
        self.context = context = CoreContext(pool, settings, notifier)
        self.delivery = Delivery(context)  # subscriptions, receive, ack, dead letters
        self.tokens = Tokens(context)  # API tokens: create, list, revoke
        # producers, check-back rounds, operator actions
        self.checkback = CheckBack(context, self.end)
        # the figures of the status page, `coordinator status` and /metrics' gauges
        self.overview = OverviewReader(context)
        # Single prepares, sends and ends are group-committed (see group_commit.py).
        self._prepares = self._group_committer(self._inserter(transactional=True))
        self._sends = self._group_committer(self._inserter(transactional=False))
        self._ends = self._group_committer(
            ending.end_validated, key=lambda request: request.transaction_id
        )

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, database_url: str, settings: Settings | None = None, *, listen: bool = False
    ) -> AsyncIterator[Coordinator]:
        """A coordinator on an already migrated database, closed on exit.

        listen=True also opens the LISTEN connection that wakes long polls.
        """
        settings = settings or Settings()
        pool = open_pool(
            database_url,
            min_size=settings.pool_min_size,
            max_size=settings.pool_max_size,
            timeout=settings.pool_timeout_seconds,
        )
        await pool.open(wait=True)
        notifier = (
            Notifier(database_url, CHANNELS, on_connection_lost=pool.suspect) if listen else None
        )
        try:
            if notifier is not None:
                await notifier.start()
            yield cls(pool, settings, notifier)
        finally:
            if notifier is not None:
                await notifier.stop()
            await pool.close()

    def begin_shutdown(self) -> None:
        """The server stops: every long poll answers now, with what it has.

        Idempotent, and not a close: requests in flight finish, and new ones
        are served (a long poll among them answers without waiting).
        """
        self.context.stopping.set()
        if self.notifier is not None:
            self.notifier.wake_all()

    @property
    def stopping(self) -> bool:
        return self.context.stopping.is_set()

    def _inserter(self, *, transactional: bool) -> RunBatch[NewMessage, SendResult]:
        async def run(
            conn: AsyncConnection[Any], messages: list[NewMessage]
        ) -> list[SendResult | CoordinatorError]:
            return await producing.insert_validated(
                conn, messages, self.settings, transactional=transactional
            )

        return run

    def _group_committer(
        self, run: RunBatch[Item, Result], key: Callable[[Item], Hashable] | None = None
    ) -> GroupCommitter[Item, Result]:
        return GroupCommitter(
            self.pool,
            run,
            max_batch=self.settings.group_commit_max_batch,
            max_inflight=self.settings.group_commit_max_inflight,
            key=key,
        )

    async def prepare(self, message: NewMessage) -> SendResult:
        """Store a half message; returns once it is durably committed."""
        producing.validate_batch([message], self.settings, transactional=True)
        return await self._prepares.submit(_with_message_id(message))

    async def prepare_batch(self, messages: Sequence[NewMessage]) -> list[SendResult]:
        async with self.pool.connection() as conn:
            return await producing.store_messages(conn, messages, self.settings, transactional=True)

    async def send(self, message: NewMessage) -> SendResult:
        """Store a normal message: committed (deliverable) at once."""
        producing.validate_batch([message], self.settings, transactional=False)
        return await self._sends.submit(_with_message_id(message))

    async def send_batch(self, messages: Sequence[NewMessage]) -> list[SendResult]:
        async with self.pool.connection() as conn:
            return await producing.store_messages(
                conn, messages, self.settings, transactional=False
            )

    async def end(self, request: EndRequest) -> EndResult:
        ending.validate_end(request)
        if request.resolution is Resolution.UNKNOWN:
            async with self.pool.connection() as conn:
                return await ending.report_unknown(conn, request)
        result = await self._ends.submit(request)
        metrics.count_ends([request], [result])
        return result

    async def end_batch(self, requests: Sequence[EndRequest]) -> list[EndResult | CoordinatorError]:
        """End many transactions in one database transaction; one outcome per request.

        Unlike a batch of half messages this is not all-or-nothing: each
        request is its own compare-and-set and gets its own answer or error.
        """
        async with self.pool.connection() as conn, conn.transaction():
            outcomes = await ending.end_many(conn, requests, self.settings.max_batch_size)
        metrics.count_ends(requests, outcomes)
        return outcomes

    async def get_message(
        self,
        *,
        offset: int | None = None,
        message_id: str | None = None,
        transaction_id: str | None = None,
    ) -> MessageRecord:
        async with self.pool.connection() as conn:
            return await inspection.get_message(
                conn, offset=offset, message_id=message_id, transaction_id=transaction_id
            )

    async def status(self) -> Status:
        async with self.pool.connection() as conn:
            return await inspection.get_status(conn)

    async def database_ok(self) -> bool:
        try:
            async with self.pool.connection(timeout=2.0) as conn:
                await execute(conn, "ping")
        except Exception:  # any failure means "not healthy"; /health reports it
            return False
        return True


def _with_message_id(message: NewMessage) -> NewMessage:
    # The id is minted before the message joins a group-commit batch, so that
    # a batch run again (one request at a time after a failed batch, whose
    # connection may have died after its COMMIT) stores each message once.
    if message.message_id is not None:
        return message
    return replace(message, message_id=new_message_id())
