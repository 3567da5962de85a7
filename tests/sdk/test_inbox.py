"""The consumer inbox runs a message's effect once per consumer group, in the
consumer's own database, whatever the number of deliveries."""

from __future__ import annotations

import ast
import asyncio
import logging
import re
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool
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

GROUP = "billing"
SUBSCRIPTIONS = {"orders": "*"}


def _send(url: str, count: int = 1) -> list[str]:
    """Commit `count` messages to the topic over HTTP; returns their message ids."""
    ids = []
    with httpx.Client(base_url=url) as http:
        for n in range(count):
            sent = http.post(
                "/v1/transactions",
                json={"topic": "orders", "producer_group": "shop", "body_text": f"order {n}"},
            ).json()
            ended = http.post(
                f"/v1/transactions/{sent['transaction_id']}/end",
                json={"producer_group": "shop", "resolution": "commit"},
            )
            assert ended.json()["state"] == "committed"
            ids.append(sent["message_id"])
    return ids


def _receive_one(consumer: SimpleConsumer, **options: float) -> ReceivedMessage:
    """The next message, within a bounded number of long polls (a slow machine's
    poll may end before a message becomes visible again)."""
    for _ in range(10):
        received = consumer.receive(1, **options)
        if received:
            (message,) = received
            return message
    raise AssertionError("no message within 10 receives")


async def _receive_one_async(consumer: AsyncSimpleConsumer) -> ReceivedMessage:
    for _ in range(10):
        received = await consumer.receive(1)
        if received:
            (message,) = received
            return message
    raise AssertionError("no message within 10 receives")


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
        self._counting = threading.Lock()  # a push consumer runs handlers on several threads

    def __call__(self, conn: Any, message: ReceivedMessage) -> None:
        with self._counting:
            self.runs += 1
            run = self.runs
        _write(conn, message)
        if run == 1:
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
    tables: Inbox, database: Any, db: psycopg.Connection
) -> None:
    inbox = Inbox(database, GROUP, purge_batch=2)  # several batches
    for offset in range(1, 8):
        inbox.listener(_write)(_message(offset, f"m-{offset}"))
    Inbox(database, "audit").listener(_write)(_message(1, "m-1"))
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


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["url", "pool", "engine"])
async def test_the_async_inbox_skips_duplicates_and_purges_old_rows(
    tables: Inbox, database_url: str, db: psycopg.Connection, kind: str
) -> None:
    engine = create_async_engine(sqlalchemy_url(database_url))
    pool = AsyncConnectionPool(database_url, min_size=1, max_size=2, open=False)
    database = {"url": database_url, "pool": pool, "engine": engine}[kind]
    try:
        await pool.open()
        inbox = AsyncInbox(database, GROUP, purge_batch=1)
        await inbox.create_table()
        listen = inbox.listener(_write_async)
        for offset in (1, 1, 2):
            assert await listen(_message(offset, f"m-{offset}")) == "success"
        assert _effects(db) == ["m-1", "m-2"]
        db.execute("UPDATE coordinator_inbox SET received_at = now() - interval '15 days'")
        assert await inbox.purge() == 2
    finally:
        await pool.close()
        await engine.dispose()
    assert _inbox(db) == []


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
        (sent,) = _send(server.url)
        message = _receive_one(consumer)
        # Processed and committed, then the consumer dies before its ack: the
        # message comes back when its invisible duration ends (made short here).
        with psycopg.connect(tables.database) as conn:
            assert tables.process(conn, message, _write) is True
        consumer.change_invisible_duration(message, 0.1)
        again = _receive_one(consumer)
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
        (sent,) = _send(server.url)
        message = _receive_one(consumer, invisible_seconds=0.5)
        with pytest.raises(RuntimeError):
            tables.consume(consumer, message, handler)
        assert (_effects(db), _inbox(db)) == ([], [])
        again = _receive_one(consumer)  # not acked: back after its invisible duration
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
    no_retry = RetryPolicy(retry_seconds=0)
    first = LiveServer(database_url, fast_settings).__enter__()
    consumer = SimpleConsumer(GROUP, SUBSCRIPTIONS, first.url, wait_seconds=2, retry=no_retry)
    try:
        consumer.start()
        (sent,) = _send(first.url)
        message = _receive_one(consumer, invisible_seconds=1)
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
        again = _receive_one(consumer)
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
            sent = _send(server.url, 2)
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
        (sent,) = await asyncio.to_thread(_send, server.url)
        message = await _receive_one_async(consumer)
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            assert await inbox.process(conn, message, _write_async) is True
        await consumer.change_invisible_duration(message, 0.1)
        again = await _receive_one_async(consumer)
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
            (sent,) = await asyncio.to_thread(_send, server.url)
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


# --- docs/exactly-once.md stays true ---------------------------------------------------------

EXACTLY_ONCE = Path(__file__).resolve().parents[2] / "docs" / "exactly-once.md"


def _inbox_section(heading: str = "## Consumer inbox") -> str:
    page = EXACTLY_ONCE.read_text()
    start = page.index(f"\n{heading}\n")
    end = page.find("\n## ", start + len(heading) + 2)
    return page[start : end if end != -1 else len(page)]


def _blocks(text_: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text_, flags=re.DOTALL)


def test_the_documented_table_is_the_inbox_ddl(database_url: str) -> None:
    documented = _blocks(_inbox_section(), "sql")[0]
    assert documented.strip() == Inbox(database_url, GROUP).ddl()


def test_the_documented_plain_sql_recipe_records_a_message_once(
    tables: Inbox, database_url: str, db: psycopg.Connection
) -> None:
    (recipe,) = _blocks(_inbox_section("### The same recipe as plain SQL"), "sql")
    db.execute("CREATE TABLE invoices (order_id text NOT NULL)")
    claim = recipe[recipe.index("INSERT INTO coordinator_inbox") :].split(";")[0]
    effect = recipe[recipe.index("INSERT INTO invoices") :].split(";")[0]
    for _ in range(2):  # the second run is a redelivery
        with psycopg.connect(database_url) as conn:
            if conn.execute(claim).fetchone() is not None:
                conn.execute(effect)
    assert db.execute("SELECT order_id FROM invoices").fetchall() == [("order-1001",)]


def test_the_documented_python_snippets_compile() -> None:
    for snippet in _blocks(_inbox_section(), "python"):
        compile(snippet, "exactly-once.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
