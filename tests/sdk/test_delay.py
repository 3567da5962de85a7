"""Delay and timer messages, recall and trace context through the SDK (sync and async)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from coordinator.client import (
    AsyncSimpleConsumer,
    AsyncTransactionListener,
    AsyncTransactionProducer,
    InvalidRequest,
    LocalTransactionState,
    Message,
    SimpleConsumer,
    StateConflict,
    TransactionListener,
    TransactionProducer,
)
from tests.conftest import LiveServer

TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class Commit(TransactionListener):
    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, msg: Message) -> LocalTransactionState:
        return LocalTransactionState.COMMIT


class AsyncCommit(AsyncTransactionListener):
    async def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT

    async def check_local_transaction(self, msg: Message) -> LocalTransactionState:
        return LocalTransactionState.COMMIT


def test_delayed_messages_recall_and_trace_context(server: LiveServer) -> None:
    with (
        SimpleConsumer("billing", {"reminders": "*"}, server.url, wait_seconds=0) as consumer,
        TransactionProducer("reminder-svc", Commit(), server.url) as producer,
    ):
        # local time, naive: the SDK sends it with this machine's offset
        soon = producer.send(
            Message("reminders", "soon", deliver_at=datetime.now() + timedelta(seconds=1))
        )
        later = producer.send(Message("reminders", "later", delay_seconds=60))
        half = producer.send_message_in_transaction(
            Message("reminders", "half", delay_seconds=1, trace_context=TRACE)
        )
        assert soon.recall_handle and later.recall_handle and half.recall_handle
        assert consumer.receive(10) == []
        recalled = producer.recall(later.recall_handle)
        assert recalled.changed and recalled.message_id == later.message_id
        got = {}
        for _ in range(10):
            for message in consumer.receive(10, wait_seconds=5):
                got[message.text] = message
                consumer.ack(message)
            if len(got) == 2:
                break
        assert set(got) == {"soon", "half"}
        assert got["half"].trace_context == TRACE and got["half"].deliver_at is not None
        with pytest.raises(StateConflict, match="already delivered"):
            producer.recall(soon.recall_handle)
        with pytest.raises(InvalidRequest, match="max_delay_seconds"):
            producer.send(Message("reminders", "too late", delay_seconds=10 * 24 * 3600))


@pytest.mark.anyio
async def test_the_async_producer_sends_and_recalls_delayed_messages(server: LiveServer) -> None:
    async with (
        AsyncSimpleConsumer("audit", {"timers": "*"}, server.url, wait_seconds=0) as consumer,
        AsyncTransactionProducer("timer-svc", AsyncCommit(), server.url) as producer,
    ):
        sent = await producer.send(Message("timers", "t", delay_seconds=30, trace_context=TRACE))
        assert sent.recall_handle is not None
        assert (await producer.recall(sent.recall_handle)).changed
        assert not (await producer.recall(sent.recall_handle)).changed
        assert await consumer.receive(10) == []
