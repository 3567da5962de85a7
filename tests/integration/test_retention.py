"""The retention job: each kind of row goes exactly when its retention says, and not before.

Rounds are run by hand with a `now` of the test's choosing (hours ahead of
the database clock), so nothing waits; the scheduler's own test runs rounds
every fraction of a second with a retention of a second.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.core.retention.scheduler import running_retention
from tests.conftest import LiveServer
from tests.factories import TOPIC, end, half

pytestmark = pytest.mark.anyio

CONSUMERS = "billing"


def retention_settings(**overrides: object) -> Settings:
    values: dict[str, object] = {
        "database_url": None,
        "check_scheduler_enabled": False,
        "retention_enabled": False,  # rounds are run by hand
        "resolved_retention_hours": 1,
        "unacked_retention_hours": 2,
        "dead_letter_retention_hours": 3,
        "idle_consumer_group_hours": 10,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture
def settings() -> Settings:
    return retention_settings()


def db_now(db: psycopg.Connection) -> datetime:
    row = db.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]


def present(db: psycopg.Connection, *offsets: int) -> set[int]:
    rows = db.execute("SELECT id FROM messages WHERE id = ANY(%s)", (list(offsets),)).fetchall()
    return {row[0] for row in rows}


def history_of(db: psycopg.Connection, *offsets: int) -> int:
    row = db.execute(
        "SELECT count(*) FROM message_history WHERE message_offset = ANY(%s)", (list(offsets),)
    ).fetchone()
    assert row is not None
    return row[0]


def count(db: psycopg.Connection, table: str) -> int:
    row = db.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return row[0]


async def test_resolved_and_unacked_messages_go_at_their_bounds_with_history_and_deliveries(
    core: Coordinator, db: psycopg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    await core.delivery.subscribe(CONSUMERS, TOPIC)
    rolled = await core.transactions.prepare(half(body=b"rolled back"))
    await core.transactions.end(end(rolled.transaction_id, "rollback"))  # type: ignore[arg-type]
    acked = await core.transactions.prepare(half(body=b"committed, acked"))
    await core.transactions.end(end(acked.transaction_id, "commit"))  # type: ignore[arg-type]
    (received,) = await core.delivery.receive(CONSUMERS, max_messages=1)
    assert received.offset == acked.offset
    await core.delivery.ack(CONSUMERS, received.receipt_handle)
    unacked = await core.transactions.send(half(body=b"committed, never acked"))
    waiting = await core.transactions.prepare(half(body=b"still prepared"))
    start = db_now(db)

    early = await core.retention.run_round(start + timedelta(minutes=50))
    assert not early.removed_anything
    assert present(db, rolled.offset, acked.offset, unacked.offset, waiting.offset) == {
        rolled.offset,
        acked.offset,
        unacked.offset,
        waiting.offset,
    }

    resolved = await core.retention.run_round(start + timedelta(minutes=70))
    assert resolved.messages == {"rolled_back": 1, "committed": 1}
    assert present(db, rolled.offset, acked.offset) == set()
    assert history_of(db, rolled.offset, acked.offset) == 0
    # Some group has not acked it: kept while younger than the unacked bound.
    assert present(db, unacked.offset) == {unacked.offset}
    assert count(db, "deliveries") == 1

    kept = await core.retention.run_round(start + timedelta(minutes=110))
    assert not kept.removed_anything
    assert present(db, unacked.offset) == {unacked.offset}

    dropped = await core.retention.run_round(start + timedelta(minutes=130))
    assert dropped.unacked == {CONSUMERS: 1}
    lost = [r.getMessage() for r in caplog.records if "unacked messages" in r.getMessage()]
    assert lost == [
        f"retention: consumer group {CONSUMERS} lost 1 unacked messages older than 2 hours"
    ]
    assert dropped.messages == {"committed": 1}
    assert present(db, unacked.offset) == set()
    assert history_of(db, unacked.offset) == 0
    assert count(db, "deliveries") == 0
    # A half message is never retention's: it expires through the check-back.
    assert present(db, waiting.offset) == {waiting.offset}
    assert core.retention.last_result is dropped
    figures = {table.table: table for table in dropped.tables}
    assert set(figures) == {"messages", "message_history", "deliveries", "dead_letters"}
    assert figures["messages"].bytes > 0


async def test_a_timer_message_counts_its_unacked_bound_from_its_delivery_time(
    core: Coordinator, db: psycopg.Connection
) -> None:
    await core.delivery.subscribe(CONSUMERS, TOPIC)
    start = db_now(db)
    timer = await core.transactions.send(half(deliver_at=start + timedelta(hours=3)))

    # Past the unacked bound after the commit, not after the delivery time.
    kept = await core.retention.run_round(start + timedelta(hours=4))
    assert kept.unacked == {}
    assert present(db, timer.offset) == {timer.offset}

    dropped = await core.retention.run_round(start + timedelta(hours=5, minutes=10))
    assert dropped.unacked == {CONSUMERS: 1}
    assert present(db, timer.offset) == set()


async def test_a_message_acked_after_its_retention_goes_within_a_minute_of_the_ack(
    core: Coordinator, db: psycopg.Connection
) -> None:
    await core.delivery.subscribe(CONSUMERS, TOPIC)
    late = await core.transactions.send(half(body=b"acked late"))
    start = db_now(db)
    held = await core.retention.run_round(start + timedelta(minutes=70))
    assert present(db, late.offset) == {late.offset}  # its delivery holds it
    assert not held.removed_anything

    (received,) = await core.delivery.receive(CONSUMERS, max_messages=1)
    await core.delivery.ack(CONSUMERS, received.receipt_handle)
    # Rounds pass over what they found held, but walk everything again each minute.
    await core.retention.run_round(start + timedelta(minutes=71, seconds=1))
    assert present(db, late.offset) == set()


async def test_a_dead_letter_keeps_its_message_until_its_own_retention(
    core: Coordinator, db: psycopg.Connection
) -> None:
    await core.delivery.subscribe(CONSUMERS, TOPIC)
    sent = await core.transactions.send(half(body=b"poison"))
    (received,) = await core.delivery.receive(CONSUMERS, max_messages=1)
    await core.delivery.dead_letter(CONSUMERS, received.receipt_handle)
    start = db_now(db)

    for minutes in (70, 130, 175):  # past the resolved and the unacked bounds
        result = await core.retention.run_round(start + timedelta(minutes=minutes))
        assert not result.removed_anything
        assert present(db, sent.offset) == {sent.offset}
        assert count(db, "dead_letters") == 1

    gone = await core.retention.run_round(start + timedelta(minutes=185))
    assert gone.dead_letters == {CONSUMERS: 1}
    assert gone.messages == {"committed": 1}
    assert present(db, sent.offset) == set()
    assert count(db, "dead_letters") == 0


async def dead_letter_an_old_message(core: Coordinator, db: psycopg.Connection) -> int:
    """A message committed and dead-lettered five hours ago (past the unacked
    bound, 2 h); returns its offset."""
    old = await core.transactions.send(half(body=b"poison, committed long ago"))
    (received,) = await core.delivery.receive(CONSUMERS, max_messages=1)
    await core.delivery.dead_letter(CONSUMERS, received.receipt_handle)
    db.execute(
        "UPDATE dead_letters SET committed_at = committed_at - interval '5 hours', "
        "dead_at = dead_at - interval '5 hours'"
    )
    return old.offset


async def test_a_requeued_dead_letter_counts_its_unacked_bound_from_the_requeue(
    core: Coordinator, db: psycopg.Connection
) -> None:
    await core.delivery.subscribe(CONSUMERS, TOPIC)
    old = await dead_letter_an_old_message(core, db)
    assert await core.delivery.requeue_dead_letters(CONSUMERS) == 1
    requeued = db.execute(
        "SELECT committed_at, requeued_at FROM deliveries WHERE message_offset = %s", (old,)
    ).fetchone()
    assert requeued is not None
    # Consumers still see when the message was committed.
    assert requeued[0] < requeued[1] - timedelta(hours=4)
    start = db_now(db)

    kept = await core.retention.run_round(start + timedelta(hours=1))
    assert not kept.unacked
    assert present(db, old) == {old}

    dropped = await core.retention.run_round(start + timedelta(hours=2, minutes=10))
    assert dropped.unacked == {CONSUMERS: 1}
    assert present(db, old) == set()


async def test_the_oldest_delivery_kept_may_be_a_requeued_one_with_a_newer_id(
    core: Coordinator, db: psycopg.Connection
) -> None:
    await core.delivery.subscribe(CONSUMERS, TOPIC)
    old = await dead_letter_an_old_message(core, db)
    await core.transactions.send(half(body=b"committed now, still pending"))
    assert await core.delivery.requeue_dead_letters(CONSUMERS) == 1
    first = db.execute("SELECT message_offset FROM deliveries ORDER BY id LIMIT 1").fetchone()
    assert first is not None and first[0] != old

    result = await core.retention.run_round(db_now(db))
    figures = {table.table: table for table in result.tables}
    oldest = figures["deliveries"].oldest_age_seconds
    assert oldest is not None and oldest >= 5 * 3600


@pytest.mark.parametrize("settings", [retention_settings(duplicate_window_hours=5)])
async def test_a_retried_message_id_inside_the_window_is_not_delivered_twice(
    core: Coordinator, db: psycopg.Connection
) -> None:
    await core.delivery.subscribe(CONSUMERS, TOPIC)
    first = await core.transactions.send(half(body=b"pay 10", message_id="pay-1001"))
    other = await core.transactions.send(half(body=b"older"))
    # The other one was born (and sent) before the window: retention may take it.
    db.execute(
        "UPDATE messages SET born_at = born_at - interval '6 hours', "
        "resolved_at = resolved_at - interval '6 hours' WHERE id = %s",
        (other.offset,),
    )
    received = await core.delivery.receive(CONSUMERS, max_messages=10)
    for message in received:
        await core.delivery.ack(CONSUMERS, message.receipt_handle)
    start = db_now(db)

    result = await core.retention.run_round(start + timedelta(hours=2))
    assert result.messages == {"committed": 1}
    assert present(db, first.offset, other.offset) == {first.offset}

    retried = await core.transactions.send(half(body=b"pay 10", message_id="pay-1001"))
    assert (retried.created, retried.offset) == (False, first.offset)
    assert await core.delivery.receive(CONSUMERS, max_messages=10) == []

    after = await core.retention.run_round(start + timedelta(hours=5, minutes=10))
    assert after.messages == {"committed": 1}
    assert present(db, first.offset) == set()


async def test_with_an_archive_directory_no_message_is_deleted_by_retention(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    settings = retention_settings(archive_dir=tmp_path / "archive")
    async with Coordinator.connect(database_url, settings) as core:
        await core.delivery.subscribe(CONSUMERS, TOPIC)
        rolled = await core.transactions.prepare(half())
        await core.transactions.end(end(rolled.transaction_id, "rollback"))  # type: ignore[arg-type]
        sent = await core.transactions.send(half(body=b"never acked"))
        history = history_of(db, rolled.offset, sent.offset)

        result = await core.retention.run_round(db_now(db) + timedelta(days=30))

        assert result.messages == {}
        assert present(db, rolled.offset, sent.offset) == {rolled.offset, sent.offset}
        assert history_of(db, rolled.offset, sent.offset) == history
        # The delivery nobody acked is dropped at its bound: the message is
        # then archivable, and `pipeline archive` takes it.
        assert result.unacked == {CONSUMERS: 1}
        row = db.execute(
            "SELECT count(*) FROM archivable_messages WHERE id = ANY(%s)",
            ([rolled.offset, sent.offset],),
        ).fetchone()
        assert row == (2,)


async def test_idle_consumer_groups_are_reported_and_removed_only_when_configured(
    database_url: str, db: psycopg.Connection
) -> None:
    keeping = retention_settings(unacked_retention_hours=100)
    idle = ["idle-a", "idle-b", "idle-c"]
    async with Coordinator.connect(database_url, keeping) as core:
        for group in [*idle, CONSUMERS]:
            await core.delivery.subscribe(group, TOPIC)
        await core.delivery.subscribe("idle-a", "other-topic")
        await core.transactions.send(half())
        start = db_now(db)
        await core.delivery.receive(CONSUMERS, max_messages=1)  # seen by this node
        await core.retention.run_round(start + timedelta(hours=9))  # records it then

        found = await core.retention.run_round(start + timedelta(hours=11))
        assert [group.consumer_group for group in found.idle_groups] == idle
        assert [group.pending for group in found.idle_groups] == [1, 1, 1]
        assert found.removed_groups == []
        assert count(db, "subscriptions") == 5

    # Two groups per statement: the three idle ones take two.
    removing = retention_settings(
        unacked_retention_hours=100, remove_idle_consumer_groups=True, retention_batch_size=2
    )
    async with Coordinator.connect(database_url, removing) as core:
        removed = await core.retention.run_round(start + timedelta(hours=11))
        assert removed.removed_groups == idle
        assert removed.removed["consumer_groups"] == 3
        rows = db.execute("SELECT consumer_group FROM subscriptions").fetchall()
        assert rows == [(CONSUMERS,)]
        row = db.execute(
            "SELECT count(*) FROM deliveries WHERE consumer_group LIKE 'idle-%'"
        ).fetchone()
        assert row == (0,)


BACKLOG = 20_000


@pytest.mark.parametrize("settings", [retention_settings(retention_batch_size=2_000)])
async def test_two_nodes_delete_each_row_once_and_never_block_a_commit(
    database_url: str, db: psycopg.Connection, settings: Settings
) -> None:
    # A backlog resolved two hours ago, with its history.
    db.execute(
        """
        WITH made AS (
            INSERT INTO messages (message_id, kind, topic, body, state, born_at, resolved_at,
                                  resolution_source)
            SELECT 'old-' || i, 'normal', 'old-topic', '\\x00', 'committed',
                   now() - interval '2 hours', now() - interval '2 hours', 'client'
            FROM generate_series(1, %s) AS i
            RETURNING id
        )
        INSERT INTO message_history (message_offset, source, to_state)
        SELECT id, 'client', 'committed' FROM made
        """,
        (BACKLOG,),
    )
    async with (
        Coordinator.connect(database_url, settings) as first,
        Coordinator.connect(database_url, settings) as second,
    ):

        async def commit_meanwhile() -> tuple[int, float]:
            await asyncio.sleep(0.05)  # inside the rounds' deletes
            began = time.monotonic()
            prepared = await first.transactions.prepare(half(body=b"hot path"))
            await first.transactions.end(end(prepared.transaction_id, "commit"))  # type: ignore[arg-type]
            return prepared.offset, time.monotonic() - began

        one, two, (hot, seconds) = await asyncio.gather(
            first.retention.run_round(), second.retention.run_round(), commit_meanwhile()
        )

    assert sum(one.messages.values()) + sum(two.messages.values()) == BACKLOG
    assert count(db, "messages") == 1  # the new message only
    assert present(db, hot) == {hot}
    assert count(db, "message_history") == 2  # its prepare and its commit
    # Generous: a commit that waited for the deletes would wait for all of them.
    assert seconds < 5.0


@pytest.mark.parametrize(
    "settings",
    [retention_settings(resolved_retention_hours=1 / 3600, retention_interval_seconds=0.2)],
)
async def test_the_scheduled_job_deletes_a_message_soon_after_its_retention(
    core: Coordinator, db: psycopg.Connection
) -> None:
    sent = await core.transactions.send(half(topic="nobody-listens"))
    enabled = dataclasses.replace(core.configs.retention, retention_enabled=True)
    async with running_retention(core.retention.run_round, enabled):
        for _ in range(100):  # up to 10 s
            if not present(db, sent.offset):
                break
            await asyncio.sleep(0.1)
    assert present(db, sent.offset) == set()


async def test_a_round_counts_what_it_removed_and_logs_a_line(
    core: Coordinator, db: psycopg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    def removed() -> float | None:
        registry = core.meter.registry
        return registry.get_sample_value(
            "coordinator_retention_removed_total", {"kind": "messages"}
        )

    assert removed() == 0  # a fresh core's meter: its series start at 0
    await core.transactions.send(half(topic="nobody-listens"))
    caplog.set_level(logging.INFO, logger="coordinator.core.retention")

    quiet = await core.retention.run_round()
    assert not quiet.removed_anything
    assert not [r for r in caplog.records if r.getMessage().startswith("retention round")]

    await core.retention.run_round(db_now(db) + timedelta(hours=2))
    assert removed() == 1
    (line,) = [r.getMessage() for r in caplog.records if "retention round" in r.getMessage()]
    assert line.startswith("retention round: 1 messages, 0 unacked deliveries")


@pytest.mark.parametrize(
    "settings",
    [
        retention_settings(
            retention_enabled=True,
            retention_interval_seconds=0.2,
            resolved_retention_hours=1 / 3600,
        )
    ],
)
def test_a_serving_node_runs_the_job_and_shows_it_on_metrics(
    live_server: LiveServer, db: psycopg.Connection
) -> None:
    db.execute(
        "INSERT INTO messages (message_id, kind, topic, body, state, born_at, resolved_at, "
        "resolution_source) VALUES ('gone-soon', 'normal', 'old', '\\x00', 'committed', "
        "now(), now(), 'client')"
    )
    for _ in range(100):  # up to 10 s, for a retention of a second
        if count(db, "messages") == 0:
            break
        time.sleep(0.1)
    assert count(db, "messages") == 0
    page = httpx.get(f"{live_server.url}/metrics", timeout=10).text
    # Counters are the process's: other tests here may have counted too.
    removed = re.search(
        r'^coordinator_retention_removed_total\{kind="messages"\} (\S+)$', page, re.M
    )
    assert removed is not None and float(removed.group(1)) >= 1
    assert 'coordinator_table{figure="bytes",table="messages"}' in page
