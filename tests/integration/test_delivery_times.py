"""Delivery times against real PostgreSQL: delay and timer messages, half messages
with a delivery time, recall, the maximum delay, trace context, and the source
of an end in the history. Timing bounds are generous (no tight timed asserts)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from bench import delay as bench_delay
from coordinator.core import Coordinator
from coordinator.domain.errors import InvalidMessage, NotFound, StateConflict
from coordinator.domain.messages import NewMessage
from coordinator.domain.states import Resolution, Source
from tests.factories import TOPIC, end, half

pytestmark = pytest.mark.anyio

GROUP = "billing"
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def in_seconds(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def normal(body: bytes = b"remind", **fields: object) -> NewMessage:
    return NewMessage(topic=TOPIC, body=body, **fields)  # type: ignore[arg-type]


@pytest.fixture
async def subscribed(core: Coordinator) -> Coordinator:
    await core.delivery.subscribe(GROUP, TOPIC)
    return core


async def test_a_delayed_message_is_stored_at_once_and_received_at_its_time(
    subscribed: Coordinator,
) -> None:
    core = subscribed
    due = in_seconds(1.5)
    sent = await core.transactions.send(normal(deliver_at=due, trace_context=TRACE))
    assert sent.recall_handle
    assert await core.delivery.receive(GROUP) == []  # stored, not yet receivable
    record = await core.inspection.get_message(offset=sent.offset)
    assert record.deliver_at == due and record.trace_context == TRACE
    # A long poll that began before the time wakes at it, with no NOTIFY then.
    (message,) = await core.delivery.receive(GROUP, wait_seconds=20)
    arrived = datetime.now(UTC)
    assert due <= arrived < due + timedelta(seconds=5)
    assert message.deliver_at == due and message.trace_context == TRACE


async def test_a_delivery_time_in_the_past_means_now(subscribed: Coordinator) -> None:
    await subscribed.transactions.send(normal(deliver_at=in_seconds(-60)))
    assert len(await subscribed.delivery.receive(GROUP)) == 1


async def test_a_delivery_time_beyond_the_maximum_is_refused(subscribed: Coordinator) -> None:
    with pytest.raises(InvalidMessage, match="max_delay_seconds"):
        await subscribed.transactions.send(normal(deliver_at=in_seconds(4 * 24 * 3600)))
    with pytest.raises(InvalidMessage, match="time zone"):
        await subscribed.transactions.send(normal(deliver_at=datetime.now() + timedelta(1)))
    with pytest.raises(InvalidMessage, match="FIFO"):
        await subscribed.transactions.send(normal(deliver_at=in_seconds(5), message_group="g"))


async def test_a_bad_trace_context_is_refused(subscribed: Coordinator) -> None:
    for bad in ["not-a-trace", TRACE.upper(), "00-" + "0" * 32 + "-00f067aa0ba902b7-01"]:
        with pytest.raises(InvalidMessage, match="traceparent"):
            await subscribed.transactions.send(normal(trace_context=bad))
    with pytest.raises(InvalidMessage, match="longer"):
        await subscribed.transactions.send(normal(trace_context="0" * 300))


async def test_a_half_message_with_a_delivery_time_waits_for_its_commit_and_its_time(
    subscribed: Coordinator,
) -> None:
    core = subscribed
    due = in_seconds(1.5)
    sent = await core.transactions.prepare(half(deliver_at=due))
    assert sent.recall_handle
    with pytest.raises(StateConflict, match="roll its transaction back"):
        await core.transactions.recall(sent.recall_handle)
    await asyncio.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()) + 0.3)
    assert await core.delivery.receive(GROUP) == []  # its time came, not its commit
    await core.transactions.end(end(sent.transaction_id, Resolution.COMMIT))
    # committed after its time: receivable at once
    (message,) = await core.delivery.receive(GROUP)
    assert message.offset == sent.offset and message.deliver_at == due


async def test_a_half_message_committed_before_its_time_waits_for_it(
    subscribed: Coordinator,
) -> None:
    core = subscribed
    due = in_seconds(2)
    sent = await core.transactions.prepare(half(deliver_at=due))
    await core.transactions.end(end(sent.transaction_id, Resolution.COMMIT))
    assert await core.delivery.receive(GROUP) == []
    (message,) = await core.delivery.receive(GROUP, wait_seconds=20)
    assert datetime.now(UTC) >= due and message.offset == sent.offset


async def test_recall_cancels_a_delayed_message_and_is_recorded(
    subscribed: Coordinator, db: psycopg.Connection
) -> None:
    core = subscribed
    await core.delivery.subscribe("shipping", TOPIC)
    sent = await core.transactions.send(normal(deliver_at=in_seconds(1)))
    assert sent.recall_handle is not None
    recalled = await core.transactions.recall(sent.recall_handle, topic=TOPIC)
    assert recalled.changed and recalled.message_id == sent.message_id
    again = await core.transactions.recall(sent.recall_handle)
    assert not again.changed  # a repeated recall changes nothing
    count = db.execute("SELECT count(*) FROM deliveries WHERE message_offset = %s", (sent.offset,))
    assert count.fetchone()[0] == 0
    # Never delivered, also after its time.
    assert await core.delivery.receive(GROUP, wait_seconds=2) == []
    record = await core.inspection.get_message(offset=sent.offset)
    assert [(h.source, h.detail) for h in record.history][-1] == (Source.CLIENT, "recalled")


async def test_recall_of_a_delivered_or_unknown_message_is_refused(
    subscribed: Coordinator,
) -> None:
    core = subscribed
    sent = await core.transactions.send(normal(deliver_at=in_seconds(0.5)))
    assert sent.recall_handle is not None
    await core.delivery.receive(GROUP, wait_seconds=20)
    with pytest.raises(StateConflict, match="already delivered"):
        await core.transactions.recall(sent.recall_handle)
    with pytest.raises(NotFound):
        await core.transactions.recall(sent.recall_handle, topic="other-topic")
    forged = sent.recall_handle.replace(sent.recall_handle[-4:], "AAAA")
    with pytest.raises((NotFound, InvalidMessage)):
        await core.transactions.recall(forged)
    with pytest.raises(InvalidMessage, match="recall handle"):
        await core.transactions.recall("not a handle")
    plain = await core.transactions.send(normal())
    assert plain.recall_handle is None


async def test_the_source_of_an_end_is_in_the_history(core: Coordinator) -> None:
    for from_check, source in [(False, Source.CLIENT), (True, Source.CHECK)]:
        sent = await core.transactions.prepare(half())
        await core.transactions.end(end(sent.transaction_id, "commit", from_check=from_check))
        record = await core.inspection.get_message(offset=sent.offset)
        assert record.history[-1].source is source


async def test_the_delay_benchmark_receives_every_message_after_its_time(
    database_url: str,
) -> None:
    """A short run of bench.delay: nothing early, nothing lost (its figures are not judged)."""
    result = await bench_delay.run(database_url, pending=300, spread=2.0, lead=2.0)
    assert result.received == result.pending == 300
    assert result.early == 0
    assert result.max_ms < 10_000  # generous: the machine may be busy
