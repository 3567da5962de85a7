"""The consumer inbox: a message's effect in PostgreSQL exactly once per consumer group.

The barrier's twin on the consumer side. Delivery is at least once: a message
comes again when its ack is lost, its invisible duration runs out, or a
consumer dies between its work and its ack. The inbox makes the work
idempotent without the handler's help. In one transaction of the consumer's
own database it inserts the message's key into an inbox table, ignoring a
conflict, and runs the handler only when the row was inserted; it commits,
and only then acks:

- a first delivery inserts the row, runs the handler, commits both;
- a redelivery finds the row: the handler is skipped, the message acked;
- a handler error rolls back the effect and the row together, and the
  message is not acked, so it comes again and runs again;
- two deliveries of one message at once (an invisible duration ran out while
  the first was working): the second insert waits on the key until the first
  transaction ends, then conflicts (it committed: skipped) or inserts (it
  rolled back: the handler runs);
- a lost ack after the commit costs one redelivery, which is skipped and acked.

The key is (consumer group, message offset). The offset is the coordinator's
number for the stored message: unique across the coordinator and the same on
every delivery of the message, a requeued dead letter's included (the
coordinator keys its own deliveries by it). The message id alone is not
enough: it is unique within its producer group (a transactional message) or
its topic (a normal one), so two producer groups may send the same id to one
topic. The id and the topic are kept beside the key for people and for
ageing.

Ageing: a row is needed while its message can still be delivered again. A
delivery is dropped `unacked_retention_hours` (72 h) after its commit, and a
dead letter an operator may requeue is kept `dead_letter_retention_hours`
(168 h) after it died, so no delivery comes later than their sum (10 days)
after a message's first commit in the inbox. The default window, 14 days,
exceeds it; `purge()` deletes older rows in bounded batches, and
`consume`/`listener` call it by themselves at most every `purge_every`
(default 10 minutes; None: never).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from typing import Any

from coordinator.client._base import survive_call_errors
from coordinator.client._databases import (
    async_transaction,
    execute,
    execute_async,
    fetchone_async,
    plain_table_name,
    transaction,
)
from coordinator.client.consumer import (
    AsyncMessageListener,
    AsyncSimpleConsumer,
    ConsumeResult,
    MessageListener,
    SimpleConsumer,
)
from coordinator.client.message import ReceivedMessage

log = logging.getLogger(__name__)

DEFAULT_TABLE = "coordinator_inbox"
# Longer than any redelivery with the coordinator's defaults (see above).
DEFAULT_WINDOW = timedelta(days=14)
DEFAULT_PURGE_EVERY = timedelta(minutes=10)
DEFAULT_PURGE_BATCH = 1000

Handler = Callable[[Any, ReceivedMessage], object]
AsyncHandler = Callable[[Any, ReceivedMessage], Awaitable[object]]

# The commit is what counts: a lost ack only brings the message back, skipped then.
_acking = "could not ack message %s after its commit; its redelivery will be skipped as a duplicate"


class _InboxTable:
    """The table's SQL and the rules both flavours share."""

    _lock_class: Callable[[], Any]

    def __init__(
        self,
        database: Any,
        consumer_group: str,
        table: str = DEFAULT_TABLE,
        *,
        window: timedelta = DEFAULT_WINDOW,
        purge_every: timedelta | None = DEFAULT_PURGE_EVERY,
        purge_batch: int = DEFAULT_PURGE_BATCH,
    ) -> None:
        plain_table_name(table, "inbox")
        if not consumer_group:
            raise ValueError("an inbox needs the consumer group it deduplicates for")
        if purge_batch < 1:
            raise ValueError(f"purge_batch must be at least 1, got {purge_batch}")
        self.database = database
        self.consumer_group = consumer_group
        self.table = table
        self.window = window
        self.purge_every = purge_every
        self.purge_batch = purge_batch
        self._last_purge: float | None = None
        # One automatic purge at a time, among a push consumer's threads or tasks.
        self._purging = self._lock_class()

    def ddl(self) -> str:
        """The inbox table and its ageing index, for your own migrations."""
        index = self.table.rsplit(".", 1)[-1] + "_received_at"
        return (
            f"CREATE TABLE IF NOT EXISTS {self.table} (\n"
            "    consumer_group text NOT NULL,\n"
            "    message_offset bigint NOT NULL,\n"
            "    message_id text NOT NULL,\n"
            "    topic text NOT NULL,\n"
            "    received_at timestamptz NOT NULL DEFAULT now(),\n"
            "    PRIMARY KEY (consumer_group, message_offset)\n"
            ");\n"
            f"CREATE INDEX IF NOT EXISTS {index} ON {self.table} (received_at)"
        )

    @property
    def _insert_sql(self) -> str:
        return (
            f"INSERT INTO {self.table} (consumer_group, message_offset, message_id, topic) "
            "VALUES (:group, :offset, :message_id, :topic) "
            "ON CONFLICT (consumer_group, message_offset) DO NOTHING RETURNING 1"
        )

    @property
    def _purge_sql(self) -> str:
        # A batch found on the received_at index, deleted by a TID scan of its
        # rows' addresses (an IN over the keys would hash-join a scan of the
        # whole table). Inbox rows are never updated: their addresses hold.
        return (
            f"DELETE FROM {self.table} WHERE ctid = ANY(ARRAY("
            f"SELECT ctid FROM {self.table} WHERE consumer_group = :group "
            "AND received_at < now() - make_interval(secs => :seconds) LIMIT :batch))"
        )

    def _key(self, message: ReceivedMessage) -> dict[str, Any]:
        return {
            "group": self.consumer_group,
            "offset": message.offset,
            "message_id": message.message_id,
            "topic": message.topic,
        }

    def _purge_params(self, older_than: timedelta | None) -> dict[str, Any]:
        age = self.window if older_than is None else older_than
        return {
            "group": self.consumer_group,
            "seconds": age.total_seconds(),
            "batch": self.purge_batch,
        }

    def _purge_due(self) -> bool:
        """Whether this call should purge; claims the turn (callers hold the lock)."""
        if self.purge_every is None:
            return False
        now = time.monotonic()
        if self._last_purge is not None and now - self._last_purge < (
            self.purge_every.total_seconds()
        ):
            return False
        self._last_purge = now
        return True

    def _check_group(self, group: str) -> None:
        if group != self.consumer_group:
            raise ValueError(
                f"this inbox deduplicates for consumer group {self.consumer_group!r}, "
                f"not for the consumer's group {group!r}"
            )


class Inbox(_InboxTable):
    """The inbox for sync consumers (SimpleConsumer, PushConsumer).

    `database` is a libpq URL (a psycopg connection per transaction), a
    psycopg_pool ConnectionPool, an SQLAlchemy Engine (the handler gets a
    Connection) or sessionmaker (the handler gets a Session).
    `handler(conn_or_session, message)` writes the message's effect on the
    connection or session it is given, inside the inbox's transaction; it
    neither commits nor rolls back.
    """

    _lock_class = threading.Lock

    def create_table(self) -> None:
        with transaction(self.database) as conn:
            for statement in self.ddl().split(";\n"):
                execute(conn, statement, {})

    def process(self, conn: Any, message: ReceivedMessage, handler: Handler) -> bool:
        """Inside the caller's own transaction: insert the key and run the handler.

        False (the handler not run) when the message was processed before. The
        caller commits, then acks; an error, the handler's included, leaves
        the transaction to be rolled back.
        """
        if execute(conn, self._insert_sql, self._key(message)).fetchone() is None:
            return False
        handler(conn, message)
        return True

    def consume(self, consumer: SimpleConsumer, message: ReceivedMessage, handler: Handler) -> bool:
        """Process `message` in a transaction of its own, commit, then ack it.

        True: the handler ran and committed; False: a duplicate, skipped. Both
        are acked (an ack that fails is logged: the message comes back and is
        skipped). A handler error is raised, after the rollback, unacked: the
        message is delivered again after its invisible duration.
        """
        self._check_group(consumer.settings.group)
        with transaction(self.database) as conn:
            ran = self.process(conn, message, handler)
        with survive_call_errors(log.warning, _acking, message.message_id):
            consumer.ack(message)
        self._purge_when_due()
        return ran

    def listener(self, handler: Handler) -> MessageListener:
        """A PushConsumer listener: SUCCESS after the commit (the consumer then
        acks); a handler error is raised, so the message is delivered again."""

        def listen(message: ReceivedMessage) -> ConsumeResult:
            with transaction(self.database) as conn:
                self.process(conn, message, handler)
            self._purge_when_due()
            return ConsumeResult.SUCCESS

        return listen

    def purge(self, older_than: timedelta | None = None) -> int:
        """Delete this group's rows older than `older_than` (default: the window),
        a batch per transaction; returns how many went."""
        params = self._purge_params(older_than)
        deleted = 0
        while True:
            with transaction(self.database) as conn:
                count = execute(conn, self._purge_sql, params).rowcount
            deleted += count
            if count < self.purge_batch:
                return deleted

    def _purge_when_due(self) -> None:
        if not self._purging.acquire(blocking=False):
            return  # another thread is purging
        try:
            if self._purge_due():
                with _surviving_purge():
                    self.purge()
        finally:
            self._purging.release()


class AsyncInbox(_InboxTable):
    """The asyncio twin, for AsyncSimpleConsumer and AsyncPushConsumer.

    `database` is a libpq URL (psycopg's AsyncConnection), a psycopg_pool
    AsyncConnectionPool, an SQLAlchemy AsyncEngine (the handler gets an
    AsyncConnection) or async_sessionmaker (an AsyncSession);
    `await handler(conn_or_session, message)`.
    """

    _lock_class = asyncio.Lock

    async def create_table(self) -> None:
        async with async_transaction(self.database) as conn:
            for statement in self.ddl().split(";\n"):
                await execute_async(conn, statement, {})

    async def process(self, conn: Any, message: ReceivedMessage, handler: AsyncHandler) -> bool:
        """Inside the caller's own transaction (see Inbox.process)."""
        inserted = await execute_async(conn, self._insert_sql, self._key(message))
        if await fetchone_async(inserted) is None:
            return False
        await handler(conn, message)
        return True

    async def consume(
        self, consumer: AsyncSimpleConsumer, message: ReceivedMessage, handler: AsyncHandler
    ) -> bool:
        """Process in a transaction of its own, commit, then ack (see Inbox.consume)."""
        self._check_group(consumer.settings.group)
        async with async_transaction(self.database) as conn:
            ran = await self.process(conn, message, handler)
        with survive_call_errors(log.warning, _acking, message.message_id):
            await consumer.ack(message)
        await self._purge_when_due()
        return ran

    def listener(self, handler: AsyncHandler) -> AsyncMessageListener:
        """An AsyncPushConsumer listener (see Inbox.listener)."""

        async def listen(message: ReceivedMessage) -> ConsumeResult:
            async with async_transaction(self.database) as conn:
                await self.process(conn, message, handler)
            await self._purge_when_due()
            return ConsumeResult.SUCCESS

        return listen

    async def purge(self, older_than: timedelta | None = None) -> int:
        """Delete this group's rows older than `older_than` (default: the window)."""
        params = self._purge_params(older_than)
        deleted = 0
        while True:
            async with async_transaction(self.database) as conn:
                count = (await execute_async(conn, self._purge_sql, params)).rowcount
            deleted += count
            if count < self.purge_batch:
                return deleted

    async def _purge_when_due(self) -> None:
        if self._purging.locked():
            return  # another task is purging
        async with self._purging:
            if self._purge_due():
                with _surviving_purge():
                    await self.purge()


@contextlib.contextmanager
def _surviving_purge() -> Iterator[None]:
    # An automatic purge is housekeeping: its failure must not fail a message
    # already committed and acked. The next one tries again.
    try:
        yield
    except Exception:
        log.warning("purging the inbox failed; tried again later", exc_info=True)
