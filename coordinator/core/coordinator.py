"""The Coordinator: the one object every interface (HTTP, gRPC, CLI, SDK) calls."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from psycopg_pool import AsyncConnectionPool

from coordinator.config import Settings
from coordinator.core import ending, inspection, producing
from coordinator.core.database import open_pool
from coordinator.core.notifier import CHANNELS, Notifier
from coordinator.models import EndRequest, EndResult, MessageRecord, NewMessage, SendResult, Status


class Coordinator:
    def __init__(
        self, pool: AsyncConnectionPool, settings: Settings, notifier: Notifier | None = None
    ) -> None:
        self.pool = pool
        self.settings = settings
        # Long polls (check requests, receives) wait on the notifier; without
        # one (CLI commands) they fall back to polling.
        self.notifier = notifier

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
            database_url, min_size=settings.pool_min_size, max_size=settings.pool_max_size
        )
        await pool.open(wait=True)
        notifier = Notifier(database_url, CHANNELS) if listen else None
        try:
            if notifier is not None:
                await notifier.start()
            yield cls(pool, settings, notifier)
        finally:
            if notifier is not None:
                await notifier.stop()
            await pool.close()

    async def prepare(self, message: NewMessage) -> SendResult:
        """Store a half message; returns once it is durably committed."""
        (result,) = await self.prepare_batch([message])
        return result

    async def prepare_batch(self, messages: Sequence[NewMessage]) -> list[SendResult]:
        async with self.pool.connection() as conn:
            return await producing.store_messages(conn, messages, self.settings, transactional=True)

    async def send(self, message: NewMessage) -> SendResult:
        """Store a normal message: committed (deliverable) at once."""
        (result,) = await self.send_batch([message])
        return result

    async def send_batch(self, messages: Sequence[NewMessage]) -> list[SendResult]:
        async with self.pool.connection() as conn:
            return await producing.store_messages(
                conn, messages, self.settings, transactional=False
            )

    async def end(self, request: EndRequest) -> EndResult:
        async with self.pool.connection() as conn:
            return await ending.end_transaction(conn, request)

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
                await conn.execute("SELECT 1")
        except Exception:  # any failure means "not healthy"; /health reports it
            return False
        return True
