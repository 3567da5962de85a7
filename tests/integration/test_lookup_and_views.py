"""Looking messages up, the status summary, and the SQL views people query."""

from __future__ import annotations

import psycopg
import pytest

from coordinator.core import Coordinator
from coordinator.domain.errors import InvalidMessage, NotFound
from coordinator.domain.states import MessageState, Resolution, Source
from tests.factories import GROUP, TOPIC, end, half

pytestmark = pytest.mark.anyio


async def test_a_message_is_found_by_offset_message_id_and_transaction_id(
    core: Coordinator,
) -> None:
    sent = await core.transactions.prepare(
        half(tags="created", keys=("k1", "k2"), properties={"p": "1"})
    )
    await core.transactions.end(end(sent.transaction_id, Resolution.COMMIT))

    by_offset = await core.inspection.get_message(offset=sent.offset)
    by_message_id = await core.inspection.get_message(message_id=sent.message_id)
    by_transaction_id = await core.inspection.get_message(transaction_id=sent.transaction_id)
    assert by_offset == by_message_id == by_transaction_id
    record = by_offset
    assert (record.topic, record.tags, record.keys, record.properties) == (
        TOPIC,
        "created",
        ("k1", "k2"),
        {"p": "1"},
    )
    assert record.state is MessageState.COMMITTED
    assert [(h.source, h.from_state, h.to_state) for h in record.history] == [
        (Source.CLIENT, None, MessageState.PREPARED),
        (Source.CLIENT, MessageState.PREPARED, MessageState.COMMITTED),
    ]


async def test_lookups_of_missing_messages_say_so(core: Coordinator) -> None:
    with pytest.raises(NotFound):
        await core.inspection.get_message(offset=999)
    with pytest.raises(NotFound):
        await core.inspection.get_message(message_id="NOPE")
    with pytest.raises(NotFound):
        await core.inspection.get_message(transaction_id="nope")
    with pytest.raises(InvalidMessage):
        await core.inspection.get_message()


async def test_status_counts_by_group_topic_and_state(core: Coordinator) -> None:
    a, b, _ = await core.transactions.prepare_batch([half(), half(), half(topic="payments")])
    await core.transactions.end(end(a.transaction_id, Resolution.COMMIT))
    await core.transactions.send(half(producer_group=None))

    status = await core.inspection.status()
    counts = {(c.producer_group, c.topic, c.state.value): c.count for c in status.counts}
    assert counts == {
        (None, TOPIC, "committed"): 1,
        (GROUP, TOPIC, "committed"): 1,
        (GROUP, TOPIC, "prepared"): 1,
        (GROUP, "payments", "prepared"): 1,
    }
    assert status.pending_total == 2
    assert status.oldest_pending is not None
    assert status.oldest_pending.transaction_id == b.transaction_id


async def test_the_sql_views_answer_the_documented_questions(
    core: Coordinator, db: psycopg.Connection
) -> None:
    a, b = await core.transactions.prepare_batch([half(), half(topic="payments")])
    await core.transactions.end(end(a.transaction_id, Resolution.ROLLBACK))
    db.execute(
        "UPDATE messages SET born_at = now() - interval '2 hours', check_count = 3 WHERE id = %s",
        (b.offset,),
    )

    pending = db.execute(
        "SELECT transaction_id, topic, check_count, age > interval '1 hour' "
        "FROM pending_transactions ORDER BY age DESC"
    ).fetchall()
    assert pending == [(b.transaction_id, "payments", 3, True)]

    counts = db.execute("SELECT producer_group, topic, state, messages FROM message_counts")
    assert sorted(counts.fetchall()) == [
        (GROUP, TOPIC, "rolled_back", 1),
        (GROUP, "payments", "prepared", 1),
    ]

    timeline = db.execute(
        "SELECT source, from_state, to_state FROM message_timeline "
        "WHERE transaction_id = %s ORDER BY at, history_id",
        (a.transaction_id,),
    ).fetchall()
    assert timeline == [("client", None, "prepared"), ("client", "prepared", "rolled_back")]
