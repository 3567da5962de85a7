"""A message id is unique within its producer group (without one: its topic), not globally."""

from __future__ import annotations

import psycopg
import pytest

from coordinator.core import Coordinator
from coordinator.db import migrate
from coordinator.domain.access import Grants, Principal
from coordinator.domain.errors import (
    AmbiguousMessageId,
    InvalidMessage,
    MessageIdConflict,
    NotFound,
    ProducerGroupMismatch,
)
from coordinator.domain.states import Resolution
from tests.factories import end, half

pytestmark = pytest.mark.anyio

ONLY_A = Principal("only-a", Grants(produce_topics=("*",), producer_groups=("group-a",)))
ONLY_C = Principal("only-c", Grants(produce_topics=("*",), producer_groups=("group-c",)))


async def test_two_groups_store_the_same_id_and_each_retries_its_own(core: Coordinator) -> None:
    a = await core.transactions.prepare(half(producer_group="group-a", message_id="ORDER-1"))
    b = await core.transactions.prepare(
        half(producer_group="group-b", message_id="ORDER-1", body=b"b's own body")
    )
    assert a.created and b.created and a.offset != b.offset

    again_a = await core.transactions.prepare(half(producer_group="group-a", message_id="ORDER-1"))
    again_b = await core.transactions.prepare(
        half(producer_group="group-b", message_id="ORDER-1", body=b"b's own body")
    )
    assert (again_a.created, again_a.offset) == (False, a.offset)
    assert (again_b.created, again_b.offset) == (False, b.offset)


async def test_messages_without_a_group_have_ids_unique_per_topic(core: Coordinator) -> None:
    one = await core.transactions.send(half(producer_group=None, topic="t1", message_id="N-1"))
    two = await core.transactions.send(half(producer_group=None, topic="t2", message_id="N-1"))
    grouped = await core.transactions.send(half(topic="t1", message_id="N-1"))
    assert one.created and two.created and grouped.created
    assert len({one.offset, two.offset, grouped.offset}) == 3

    again = await core.transactions.send(half(producer_group=None, topic="t1", message_id="N-1"))
    assert (again.created, again.offset) == (False, one.offset)
    with pytest.raises(MessageIdConflict) as refused:
        await core.transactions.send(
            half(producer_group=None, topic="t1", message_id="N-1", body=b"else")
        )
    assert "without a producer group in topic 't1'" in refused.value.message


async def test_a_conflict_names_only_the_senders_own_group(core: Coordinator) -> None:
    await core.transactions.prepare(half(producer_group="group-a", message_id="ORDER-2"))
    with pytest.raises(MessageIdConflict) as refused:
        await core.transactions.prepare(
            half(producer_group="group-a", message_id="ORDER-2", body=b"another")
        )
    assert "producer group 'group-a'" in refused.value.message


@pytest.mark.parametrize("grouped_commit", [False, True])
async def test_one_batch_may_hold_the_same_id_in_two_groups(
    core: Coordinator, grouped_commit: bool
) -> None:
    batch = [
        half(producer_group="group-a", message_id="SAME"),
        half(producer_group="group-b", message_id="SAME"),
        half(producer_group="group-a", message_id="SAME"),  # a retry within the batch
    ]
    if grouped_commit:
        results = [await core.transactions.prepare(m) for m in batch]
    else:
        results = await core.transactions.prepare_batch(batch)
    assert [r.created for r in results] == [True, True, False]
    assert results[0].offset == results[2].offset != results[1].offset


async def test_a_lookup_by_an_id_two_groups_use_asks_which_one(core: Coordinator) -> None:
    a = await core.transactions.prepare(half(producer_group="group-a", message_id="ORDER-3"))
    b = await core.transactions.prepare(half(producer_group="group-b", message_id="ORDER-3"))
    n = await core.transactions.send(half(producer_group=None, topic="t9", message_id="ORDER-3"))

    with pytest.raises(AmbiguousMessageId) as ambiguous:
        await core.inspection.get_message(message_id="ORDER-3")
    said = ambiguous.value.message
    assert "'group-a'" in said and "'group-b'" in said and "topic 't9'" in said
    assert "give the producer group" in said

    by_group = await core.inspection.get_message(message_id="ORDER-3", producer_group="group-b")
    by_topic = await core.inspection.get_message(message_id="ORDER-3", topic="t9")
    assert (by_group.offset, by_topic.offset) == (b.offset, n.offset)
    # A reader sees only its own group's message: no ambiguity, no other group named.
    mine = await core.inspection.get_message(message_id="ORDER-3", reader=ONLY_A)
    assert mine.offset == a.offset


async def test_a_message_the_reader_may_not_read_is_not_found_in_the_same_words(
    core: Coordinator,
) -> None:
    sent = await core.transactions.prepare(half(producer_group="group-a", message_id="ORDER-4"))

    async def refusal(**lookup: object) -> str:
        with pytest.raises(NotFound) as refused:
            await core.inspection.get_message(**lookup)  # type: ignore[arg-type]
        return refused.value.message

    for field, value, missing in [
        ("message_id", "ORDER-4", "NO-SUCH-ID"),
        ("transaction_id", sent.transaction_id, "no-such-transaction"),
        ("offset", sent.offset, sent.offset + 1000),
    ]:
        hidden = await refusal(**{field: value}, reader=ONLY_C)
        absent = await refusal(**{field: missing}, reader=ONLY_C)
        assert hidden == absent.replace(str(missing), str(value))
    assert await refusal(message_id="ORDER-4", producer_group="group-a", reader=ONLY_C) == (
        "no message with message id 'ORDER-4'"
    )
    with pytest.raises(InvalidMessage):
        await core.inspection.get_message(offset=sent.offset, producer_group="group-a")


async def test_producer_group_mismatch_does_not_name_the_owner(core: Coordinator) -> None:
    sent = await core.transactions.prepare(half(producer_group="secret-owner"))
    with pytest.raises(ProducerGroupMismatch) as refused:
        await core.transactions.end(end(sent.transaction_id, Resolution.COMMIT, group="intruder"))
    assert "secret-owner" not in refused.value.message
    assert "'intruder'" in refused.value.message


async def test_a_downgrade_refuses_while_two_messages_share_an_id(
    core: Coordinator, database_url: str, db: psycopg.Connection
) -> None:
    await core.transactions.prepare(half(producer_group="group-a", message_id="SHARED"))
    await core.transactions.prepare(half(producer_group="group-b", message_id="SHARED"))
    with pytest.raises(Exception, match="cannot downgrade below revision 0012: 1 message id"):
        migrate.downgrade(database_url, "0011")
    assert migrate.current_revisions(database_url) == migrate.head_revisions()

    db.execute("DELETE FROM messages WHERE producer_group = 'group-b'")
    migrate.downgrade(database_url, "0011")
    assert migrate.current_revisions(database_url) == ("0011",)
    migrate.upgrade(database_url)
    assert migrate.current_revisions(database_url) == migrate.head_revisions()
