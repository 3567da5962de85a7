"""The consumer inbox runs a message's effect once per consumer group, in the
consumer's own database, whatever the number of deliveries."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import sessionmaker

from coordinator.client import (
    AsyncInbox,
    AsyncPushConsumer,
    AsyncSimpleConsumer,
    Inbox,
    PushConsumer,
    ReceivedMessage,
    RetryPolicy,
    SimpleConsumer,
)
from coordinator.config import Settings
from coordinator.db.urls import sqlalchemy_url
from tests.conftest import LiveServer
from tests.sdk.conftest import eventually
from tests.sdk.test_consumers_and_async import _send
from tests.sdk.test_producer import COMMIT

GROUP = "billing"
SUBSCRIPTIONS = {"orders": "*"}


def _message(offset: int = 1, message_id: str = "m-1") -> ReceivedMessage:
    """A message as a consumer receives it, for the tests that need no coordinator."""
    return ReceivedMessage(
        message_id=message_id,
        offset=offset,
        topic="orders",
        body=b"order",
        tags=None,
        keys=[],
        properties={},
        receipt_handle="unused",
        delivery_attempt=1,
    )


def _write(conn: Any, message: ReceivedMessage) -> None:
    """The handler's effect: one row per run, on psycopg or SQLAlchemy alike."""
    params = {"id": message.message_id, "body": message.body.decode()}
    if type(conn).__module__.startswith("sqlalchemy"):
        conn.execute(text("INSERT INTO effects VALUES (:id, :body)"), params)
    else:
        conn.execute("INSERT INTO effects VALUES (%(id)s, %(body)s)", params)


async def _write_async(conn: Any, message: ReceivedMessage) -> None:
    params = {"id": message.message_id, "body": message.body.decode()}
    if type(conn).__module__.startswith("sqlalchemy"):
        await conn.execute(text("INSERT INTO effects VALUES (:id, :body)"), params)
    else:
        await conn.execute("INSERT INTO effects VALUES (%(id)s, %(body)s)", params)


class FailsFirst:
    """A handler that writes its effect, then raises on its first run."""

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self, conn: Any, message: ReceivedMessage) -> None:
        self.runs += 1
        _write(conn, message)
        if self.runs == 1:
            raise RuntimeError("the handler failed after its write")


@pytest.fixture
def tables(database_url: str, db: psycopg.Connection) -> Inbox:
    inbox = Inbox(database_url, GROUP)
    inbox.create_table()
    inbox.create_table()  # IF NOT EXISTS: safe in a migration run twice
    db.execute("CREATE TABLE effects (message_id text NOT NULL, body text NOT NULL)")
    return inbox


def _effects(db: psycopg.Connection) -> list[str]:
    return [row[0] for row in db.execute("SELECT message_id FROM effects ORDER BY 1")]


def _inbox(db: psycopg.Connection) -> list[tuple[str, int, str, str]]:
    return db.execute(
        "SELECT consumer_group, message_offset, message_id, topic FROM coordinator_inbox "
        "ORDER BY 1, 2"
    ).fetchall()


@pytest.fixture(params=["url", "pool", "engine", "sessionmaker"])
def database(request: pytest.FixtureRequest, database_url: str) -> Iterator[Any]:
    """Each kind of database handle the sync inbox takes."""
    if request.param == "url":
        yield database_url
    elif request.param == "pool":
        with ConnectionPool(database_url, min_size=1, max_size=2, open=True) as pool:
            yield pool
    else:
        engine = create_engine(sqlalchemy_url(database_url))
        try:
            yield engine if request.param == "engine" else sessionmaker(engine)
        finally:
            engine.dispose()


# --- the rules, on every kind of handle, with no coordinator --------------------------------


def test_a_message_runs_once_and_a_duplicate_is_skipped(
    tables: Inbox, database: Any, db: psycopg.Connection
) -> None:
    inbox = Inbox(database, GROUP)
    listen = inbox.listener(_write)
    first, other = _message(1, "m-1"), _message(2, "m-2")
    assert listen(first) == "success"
    assert listen(first) == "success"  # a redelivery: skipped, acked by the consumer
    listen(other)
    assert _effects(db) == ["m-1", "m-2"]
    assert _inbox(db) == [(GROUP, 1, "m-1", "orders"), (GROUP, 2, "m-2", "orders")]
    # Another consumer group is deduplicated on its own.
    Inbox(database, "audit").listener(_write)(first)
    assert _effects(db) == ["m-1", "m-1", "m-2"]


def test_a_handler_error_rolls_back_the_effect_and_the_inbox_row(
    tables: Inbox, database: Any, db: psycopg.Connection
) -> None:
    inbox, handler = Inbox(database, GROUP), FailsFirst()
    with pytest.raises(RuntimeError, match="failed after its write"):
        inbox.listener(handler)(_message())
    assert (_effects(db), _inbox(db)) == ([], [])
    assert inbox.listener(handler)(_message()) == "success"  # the redelivery runs it
    assert inbox.listener(handler)(_message()) == "success"
    assert (_effects(db), handler.runs) == (["m-1"], 2)


def test_a_message_with_an_id_another_producer_group_also_used_is_not_a_duplicate(
    tables: Inbox, db: psycopg.Connection
) -> None:
    # Message ids are unique per producer group: two groups on one topic may
    # share one, and the offset tells their messages apart.
    listen = tables.listener(_write)
    listen(_message(1, "same-id"))
    listen(_message(2, "same-id"))
    assert _effects(db) == ["same-id", "same-id"]


@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
def test_two_deliveries_at_once_run_the_handler_once(
    tables: Inbox, database_url: str, db: psycopg.Connection, first_ends: str
) -> None:
    message = _message()
    first = psycopg.connect(database_url)
    try:
        assert tables.process(first, message, _write) is True
        second: list[bool] = []

        def deliver_again() -> None:
            with psycopg.connect(database_url) as conn:
                second.append(tables.process(conn, message, _write))

        again = threading.Thread(target=deliver_again)
        again.start()
        # The second insert waits on the key while the first transaction runs.
        eventually(lambda: _waiting_on_a_lock(db), timeout=10)
        assert second == []
        getattr(first, first_ends)()
        again.join(timeout=10)
    finally:
        first.close()
    # Committed: the second is a duplicate. Rolled back: the second runs it.
    assert second == [first_ends == "rollback"]
    assert _effects(db) == ["m-1"]


def _waiting_on_a_lock(db: psycopg.Connection) -> bool:
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND query LIKE 'INSERT INTO coordinator_inbox%%'"
    ).fetchone()
    return row is not None and row[0] > 0


def test_purge_removes_only_rows_older_than_the_window(
    tables: Inbox, database_url: str, db: psycopg.Connection
) -> None:
    inbox = Inbox(database_url, GROUP, purge_batch=2)  # several batches
    for offset in range(1, 8):
        inbox.listener(_write)(_message(offset, f"m-{offset}"))
    Inbox(database_url, "audit").listener(_write)(_message(1, "m-1"))
    db.execute(
        "UPDATE coordinator_inbox SET received_at = now() - interval '15 days' "
        "WHERE message_offset <= 5"
    )
    db.execute(
        "UPDATE coordinator_inbox SET received_at = now() - interval '13 days' "
        "WHERE message_offset = 6"
    )
    assert inbox.purge() == 5  # the default window: 14 days
    # The other group's old row stays: each group purges its own.
    assert [(g, o) for g, o, *_ in _inbox(db)] == [("audit", 1), (GROUP, 6), (GROUP, 7)]
    assert inbox.purge(older_than=timedelta(days=10)) == 1
    assert inbox.purge() == 0


def test_the_listener_purges_by_itself_at_most_every_purge_every(
    tables: Inbox, database_url: str, db: psycopg.Connection
) -> None:
    inbox = Inbox(database_url, GROUP, window=timedelta(days=1), purge_every=timedelta(hours=1))
    listen = inbox.listener(_write)
    listen(_message(1))
    db.execute("UPDATE coordinator_inbox SET received_at = now() - interval '2 days'")
    listen(_message(2))  # not due: the first call purged a moment ago
    assert len(_inbox(db)) == 2
    inbox._last_purge = None  # an hour went by
    listen(_message(3))
    assert [o for _, o, *_ in _inbox(db)] == [2, 3]


def test_bad_arguments_are_refused_with_a_sentence(database_url: str) -> None:
    with pytest.raises(ValueError, match="not a plain SQL identifier"):
        Inbox(database_url, GROUP, table="inbox; DROP TABLE x")
    consumer = SimpleConsumer("audit", SUBSCRIPTIONS)
    with pytest.raises(ValueError, match="for consumer group 'billing', not for"):
        Inbox(database_url, GROUP).consume(consumer, _message(), _write)


# --- with a coordinator: SimpleConsumer, PushConsumer, sync and asyncio --------------------


def test_a_simple_consumer_redelivery_is_skipped_and_acked(
    server: LiveServer, tables: Inbox, db: psycopg.Connection
) -> None:
    with SimpleConsumer(GROUP, SUBSCRIPTIONS, server.url, wait_seconds=2) as consumer:
        (sent,) = _send(server.url, COMMIT)
        (message,) = consumer.receive(1)
        # Processed and committed, then the consumer dies before its ack: the
        # message comes back when its invisible duration ends (made short here).
        with psycopg.connect(tables.database) as conn:
            assert tables.process(conn, message, _write) is True
        consumer.change_invisible_duration(message, 0.1)
        (again,) = consumer.receive(1)
        assert (again.message_id, again.delivery_attempt) == (sent, 2)
        assert tables.consume(consumer, again, _fail) is False  # skipped, acked
        assert consumer.receive(1, wait_seconds=0.5) == []
    assert _effects(db) == [sent]
    assert _deliveries(db) == 0


def test_a_handler_error_is_not_acked_and_the_redelivery_commits_once(
    server: LiveServer, tables: Inbox, db: psycopg.Connection
) -> None:
    handler = FailsFirst()
    with SimpleConsumer(GROUP, SUBSCRIPTIONS, server.url, wait_seconds=2) as consumer:
        (sent,) = _send(server.url, COMMIT)
        (message,) = consumer.receive(1, invisible_seconds=0.5)
        with pytest.raises(RuntimeError):
            tables.consume(consumer, message, handler)
        assert (_effects(db), _inbox(db)) == ([], [])
        (again,) = consumer.receive(1)  # not acked: back after its invisible duration
        assert again.delivery_attempt == 2
        assert tables.consume(consumer, again, handler) is True
        assert consumer.receive(1, wait_seconds=0.5) == []
    assert _effects(db) == [sent]
    assert _deliveries(db) == 0


def test_a_failed_ack_brings_the_message_back_and_it_is_skipped_then_acked(
    database_url: str,
    fast_settings: Settings,
    tables: Inbox,
    db: psycopg.Connection,
    caplog: pytest.LogCaptureFixture,
) -> None:
    no_retry = RetryPolicy(attempts=1)
    first = LiveServer(database_url, fast_settings).__enter__()
    consumer = SimpleConsumer(GROUP, SUBSCRIPTIONS, first.url, wait_seconds=2, retry=no_retry)
    try:
        consumer.start()
        (sent,) = _send(first.url, COMMIT)
        (message,) = consumer.receive(1, invisible_seconds=1)
    finally:
        first.__exit__(None, None, None)  # the coordinator goes down before the ack
    try:
        with caplog.at_level(logging.WARNING, logger="coordinator.client.inbox"):
            assert tables.consume(consumer, message, _write) is True
    finally:
        consumer.shutdown()
    assert "could not ack message" in caplog.text and "skipped as a duplicate" in caplog.text
    assert _effects(db) == [sent]  # committed all the same
    with (
        LiveServer(database_url, fast_settings) as server,
        SimpleConsumer(GROUP, SUBSCRIPTIONS, server.url, wait_seconds=3) as consumer,
    ):
        (again,) = consumer.receive(1)
        assert again.message_id == sent and again.delivery_attempt == 2
        assert tables.consume(consumer, again, _fail) is False
    assert _effects(db) == [sent]
    assert _deliveries(db) == 0


def test_a_push_consumer_listener_commits_each_message_once(
    server: LiveServer, tables: Inbox, database_url: str, db: psycopg.Connection
) -> None:
    engine = create_engine(sqlalchemy_url(database_url))
    handler = FailsFirst()
    inbox = Inbox(sessionmaker(engine), GROUP)
    try:
        with PushConsumer(
            GROUP, SUBSCRIPTIONS, inbox.listener(handler), server.url, retry_schedule=[0.2]
        ):
            sent = _send(server.url, COMMIT, COMMIT)
            eventually(lambda: len(_inbox(db)) == 2 and _deliveries(db) == 0)
    finally:
        engine.dispose()
    assert _effects(db) == sorted(sent) and handler.runs == 3


async def _fail_async(conn: Any, message: ReceivedMessage) -> None:
    raise AssertionError("a duplicate's handler ran")


@pytest.mark.anyio
async def test_async_simple_consumer_over_psycopg_skips_a_redelivery(
    server: LiveServer, tables: Inbox, database_url: str, db: psycopg.Connection
) -> None:
    inbox = AsyncInbox(database_url, GROUP)
    async with AsyncSimpleConsumer(GROUP, SUBSCRIPTIONS, server.url, wait_seconds=2) as consumer:
        (sent,) = await asyncio.to_thread(_send, server.url, COMMIT)
        (message,) = await consumer.receive(1)
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            assert await inbox.process(conn, message, _write_async) is True
        await consumer.change_invisible_duration(message, 0.1)
        (again,) = await consumer.receive(1)
        assert await inbox.consume(consumer, again, _fail_async) is False
        assert await consumer.receive(1, wait_seconds=0.5) == []
    assert _effects(db) == [sent]


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["engine", "sessionmaker"])
async def test_async_push_consumer_over_sqlalchemy_commits_once_after_an_error(
    server: LiveServer, tables: Inbox, database_url: str, db: psycopg.Connection, kind: str
) -> None:
    engine = create_async_engine(sqlalchemy_url(database_url))
    runs = 0

    async def handler(conn: Any, message: ReceivedMessage) -> None:
        nonlocal runs
        runs += 1
        await _write_async(conn, message)
        if runs == 1:
            raise RuntimeError("the handler failed after its write")

    inbox = AsyncInbox(engine if kind == "engine" else async_sessionmaker(engine), GROUP)
    try:
        async with AsyncPushConsumer(
            GROUP, SUBSCRIPTIONS, inbox.listener(handler), server.url, retry_schedule=[0.2]
        ):
            (sent,) = await asyncio.to_thread(_send, server.url, COMMIT)
            await asyncio.to_thread(
                eventually, lambda: len(_inbox(db)) == 1 and _deliveries(db) == 0
            )
    finally:
        await engine.dispose()
    assert (_effects(db), runs) == ([sent], 2)


def _fail(conn: Any, message: ReceivedMessage) -> None:
    raise AssertionError("a duplicate's handler ran")


def _deliveries(db: psycopg.Connection) -> int:
    row = db.execute(
        "SELECT count(*) FROM deliveries WHERE consumer_group = %s", (GROUP,)
    ).fetchone()
    assert row is not None
    return int(row[0])
