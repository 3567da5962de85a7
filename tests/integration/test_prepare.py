"""Half messages and normal messages are stored durably, once."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.domain.errors import (
    InvalidMessage,
    MessageIdConflict,
    TransactionalMessagesRejected,
)
from coordinator.domain.states import MessageState
from tests.factories import GROUP, TOPIC, half

pytestmark = pytest.mark.anyio


def _row(db: psycopg.Connection, offset: int) -> tuple:
    return db.execute(
        "SELECT state, kind, producer_group, topic, body, next_check_at - born_at, "
        "resolved_at, resolution_source, check_count FROM messages WHERE id = %s",
        (offset,),
    ).fetchone()


async def test_prepare_stores_a_prepared_half_message_with_its_history(
    core: Coordinator, db: psycopg.Connection
) -> None:
    result = await core.transactions.prepare(
        half(tags="created", keys=("order-1001",), properties={"a": "b"})
    )

    assert result.created is True
    assert result.state is MessageState.PREPARED
    assert result.transaction_id and result.message_id and result.offset > 0
    state, kind, group, topic, body, first_check_after, resolved_at, source, checks = _row(
        db, result.offset
    )
    assert (state, kind, group, topic, body) == (
        "prepared",
        "transactional",
        GROUP,
        TOPIC,
        b"order 1001 created",
    )
    assert first_check_after == timedelta(seconds=6)  # transaction timeout, RocketMQ default
    assert resolved_at is None and source is None and checks == 0
    history = db.execute(
        "SELECT source, from_state, to_state FROM message_history WHERE message_offset = %s",
        (result.offset,),
    ).fetchall()
    assert history == [("client", None, "prepared")]


async def test_check_immunity_sets_the_first_check_time(
    core: Coordinator, db: psycopg.Connection
) -> None:
    result = await core.transactions.prepare(half(check_immunity_seconds=90))
    assert _row(db, result.offset)[5] == timedelta(seconds=90)


async def test_transaction_timeout_comes_from_settings(
    database_url: str, db: psycopg.Connection
) -> None:
    async with Coordinator.connect(database_url, Settings(transaction_timeout_seconds=2.5)) as core:
        result = await core.transactions.prepare(half())
    assert _row(db, result.offset)[5] == timedelta(seconds=2.5)


async def test_sending_again_with_the_same_message_id_stores_nothing_new(
    core: Coordinator, db: psycopg.Connection
) -> None:
    first = await core.transactions.prepare(half(message_id="ORDER-1001"))
    again = await core.transactions.prepare(half(message_id="ORDER-1001"))

    assert again.created is False
    assert (again.offset, again.message_id, again.transaction_id) == (
        first.offset,
        first.message_id,
        first.transaction_id,
    )
    assert db.execute("SELECT count(*) FROM messages").fetchone() == (1,)
    assert db.execute("SELECT count(*) FROM message_history").fetchone() == (1,)


async def test_a_message_id_reused_for_another_message_is_refused(
    core: Coordinator, db: psycopg.Connection
) -> None:
    await core.transactions.prepare(half(message_id="ORDER-1001"))
    with pytest.raises(MessageIdConflict):
        await core.transactions.prepare(half(body=b"something else", message_id="ORDER-1001"))
    with pytest.raises(MessageIdConflict):
        await core.transactions.prepare(half(topic="payments", message_id="ORDER-1001"))
    with pytest.raises(MessageIdConflict):
        await core.transactions.send(half(message_id="ORDER-1001"))
    assert db.execute("SELECT count(*), string_agg(body, ''::bytea) FROM messages").fetchone() == (
        1,
        b"order 1001 created",
    )


async def test_a_batch_is_stored_in_order_in_one_transaction(
    core: Coordinator, db: psycopg.Connection
) -> None:
    results = await core.transactions.prepare_batch(
        [half(body=f"m{i}".encode()) for i in range(50)]
    )

    offsets = [r.offset for r in results]
    assert offsets == sorted(offsets) and len(set(offsets)) == 50
    stored = db.execute("SELECT body FROM messages ORDER BY id").fetchall()
    assert [bytes(b) for (b,) in stored] == [f"m{i}".encode() for i in range(50)]
    assert db.execute("SELECT count(*) FROM message_history").fetchone() == (50,)


async def test_a_batch_with_one_invalid_message_stores_nothing(
    core: Coordinator, db: psycopg.Connection
) -> None:
    batch = [half(), half(topic="bad topic!"), half()]
    with pytest.raises(InvalidMessage, match="message 1: topic"):
        await core.transactions.prepare_batch(batch)
    assert db.execute("SELECT count(*) FROM messages").fetchone() == (0,)


async def test_a_batch_with_a_conflicting_message_id_stores_nothing(
    core: Coordinator, db: psycopg.Connection
) -> None:
    await core.transactions.prepare(half(message_id="TAKEN"))
    with pytest.raises(MessageIdConflict):
        await core.transactions.prepare_batch(
            [half(body=b"new"), half(body=b"other", message_id="TAKEN")]
        )
    assert db.execute("SELECT count(*) FROM messages").fetchone() == (1,)


async def test_the_same_message_id_twice_in_one_batch_is_one_message(
    core: Coordinator, db: psycopg.Connection
) -> None:
    results = await core.transactions.prepare_batch(
        [half(message_id="TWICE"), half(message_id="TWICE")]
    )
    assert results[0].created and not results[1].created
    assert results[0].offset == results[1].offset
    assert db.execute("SELECT count(*) FROM messages").fetchone() == (1,)
    with pytest.raises(MessageIdConflict):
        await core.transactions.prepare_batch(
            [half(message_id="X1"), half(body=b"different", message_id="X1")]
        )


async def test_normal_messages_are_committed_at_once(
    core: Coordinator, db: psycopg.Connection
) -> None:
    result = await core.transactions.send(half(producer_group=None))

    assert result.state is MessageState.COMMITTED and result.transaction_id is None
    state, kind, *_rest, resolved_at, source, _checks = _row(db, result.offset)
    assert (state, kind, source) == ("committed", "normal", "client")
    assert resolved_at is not None
    assert db.execute(
        "SELECT from_state, to_state FROM message_history WHERE message_offset = %s",
        (result.offset,),
    ).fetchall() == [(None, "committed")]


async def test_rejecting_transactional_messages_refuses_half_messages_only(
    database_url: str, db: psycopg.Connection
) -> None:
    async with Coordinator.connect(
        database_url, Settings(reject_transactional_messages=True)
    ) as core:
        with pytest.raises(TransactionalMessagesRejected):
            await core.transactions.prepare(half())
        await core.transactions.send(half())
    assert db.execute("SELECT kind FROM messages").fetchall() == [("normal",)]


async def test_invalid_input_is_refused_before_anything_is_stored(
    core: Coordinator, db: psycopg.Connection
) -> None:
    bad = [
        half(topic=""),
        half(topic="a" * 128),
        half(topic="RMQ_SYS_TRANS_HALF_TOPIC"),
        half(producer_group=None),
        half(producer_group="group with spaces"),
        half(body=b""),
        half(body=b"x" * (4 * 1024 * 1024 + 1)),
        half(tags="a||b"),
        half(keys=("two words",)),
        half(properties={"k": "v\x00"}),
        half(properties={"big": "x" * 40_000}),
        half(check_immunity_seconds=-1),
        half(check_immunity_seconds=73 * 3600),
        half(message_id="no spaces allowed"),
    ]
    for message in bad:
        with pytest.raises(InvalidMessage):
            await core.transactions.prepare(message)
    assert db.execute("SELECT count(*) FROM messages").fetchone() == (0,)


async def test_the_database_itself_refuses_unknown_states(db: psycopg.Connection) -> None:
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute(
            "INSERT INTO messages (message_id, transaction_id, kind, producer_group, topic, body, "
            "state) VALUES ('m', 't', 'transactional', 'g', 't', 'x', 'half-done')"
        )
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute(
            "INSERT INTO messages (message_id, kind, topic, body, state, resolved_at) "
            "VALUES ('m', 'normal', 't', 'x', 'committed', NULL)"
        )
