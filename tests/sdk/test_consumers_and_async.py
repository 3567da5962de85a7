"""Consumers (simple and push, sync and asyncio) and the asyncio producer, end to end."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
import pytest

from coordinator.client import (
    AsyncPushConsumer,
    AsyncSimpleConsumer,
    AsyncTransactionListener,
    AsyncTransactionProducer,
    ConsumeResult,
    CoordinatorUnavailable,
    InvalidRequest,
    LocalTransactionState,
    Message,
    NotFound,
    PushConsumer,
    ReceivedMessage,
    RetryPolicy,
    SimpleConsumer,
    Sql92,
    TransactionProducer,
)
from tests.conftest import LiveServer
from tests.sdk.conftest import eventually
from tests.sdk.test_producer import COMMIT, GROUP, ROLLBACK, UNKNOWN, ScriptedListener


def _send(url: str, *answers: LocalTransactionState) -> list[str]:
    """Send one transactional message per answer; returns their message ids."""
    ids = []
    with TransactionProducer(GROUP, ScriptedListener(), url) as producer:
        for i, answer in enumerate(answers):
            producer.listener.execute = answer  # type: ignore[attr-defined]
            ids.append(producer.send_message_in_transaction(Message("orders", f"m{i}")).message_id)
    return ids


def test_simple_consumer_receives_only_committed_messages_and_acks(server: LiveServer) -> None:
    with SimpleConsumer("billing", {"orders": "*"}, server.url, wait_seconds=2) as consumer:
        committed, rolled_back = _send(server.url, COMMIT, ROLLBACK)
        received = consumer.receive(10)
        assert [m.message_id for m in received] == [committed]
        (message,) = received
        assert message.text == "m0" and message.delivery_attempt == 1
        consumer.ack(message)
        assert consumer.receive(10, wait_seconds=0.3) == []
        with pytest.raises(NotFound):
            consumer.ack(message)  # already acked: gone
    assert rolled_back not in [m.message_id for m in received]


def test_a_sql92_subscription_receives_only_matching_messages(server: LiveServer) -> None:
    selected = Sql92("amount > 100 AND TAGS = 'paid'")
    with (
        SimpleConsumer("billing", {"orders": selected}, server.url, wait_seconds=2) as consumer,
        TransactionProducer(GROUP, ScriptedListener(), server.url) as producer,
    ):
        for body, tags, amount in [
            ("big", "paid", "150"),
            ("small", "paid", "5"),
            ("x", None, "900"),
        ]:
            producer.send_message_in_transaction(
                Message("orders", body, tags=tags, properties={"amount": amount})
            )
        assert [m.text for m in consumer.receive(10)] == ["big"]
    bad = SimpleConsumer("audit", {"orders": Sql92("amount > ")}, server.url)
    with pytest.raises(InvalidRequest, match="position 10") as refused:
        bad.start()
    assert refused.value.code == "invalid_filter_expression"


def test_change_invisible_duration_gives_a_message_back_with_a_new_handle(
    server: LiveServer,
) -> None:
    with SimpleConsumer("billing", {"orders": "*"}, server.url, wait_seconds=2) as consumer:
        _send(server.url, COMMIT)
        (message,) = consumer.receive(1, invisible_seconds=30)
        returned = consumer.change_invisible_duration(message, 0.2)
        assert returned.receipt_handle != message.receipt_handle
        again = eventually(lambda: consumer.receive(1, wait_seconds=1))
        assert again[0].message_id == message.message_id  # type: ignore[index]
        assert again[0].delivery_attempt == 2  # type: ignore[index]
        consumer.ack(again[0])  # type: ignore[index]


def test_push_consumer_acks_successes_and_retries_failures(server: LiveServer) -> None:
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()

    def listener(message: ReceivedMessage) -> ConsumeResult:
        with lock:
            seen.append((message.text, message.delivery_attempt))
        if message.text == "m1" and message.delivery_attempt == 1:
            raise RuntimeError("first try fails")
        return ConsumeResult.SUCCESS

    with PushConsumer(
        "shipping", {"orders": "*"}, listener, server.url, threads=2, retry_schedule=[0.2]
    ):
        _send(server.url, COMMIT, COMMIT, ROLLBACK)
        eventually(lambda: ("m1", 2) in seen)
        eventually(lambda: ("m0", 1) in seen)
    assert sorted(seen) == [("m0", 1), ("m1", 1), ("m1", 2)]
    with SimpleConsumer("shipping", {"orders": "*"}, server.url) as check:
        assert check.receive(10, wait_seconds=0.3) == []  # everything was acked


class AsyncScripted(AsyncTransactionListener):
    def __init__(self, execute: Any, check: Any) -> None:
        self.execute, self.check, self.checked = execute, check, []

    async def execute_local_transaction(self, msg: Message, arg: Any) -> Any:
        await asyncio.sleep(0)
        return self.execute

    async def check_local_transaction(self, msg: Message) -> Any:
        self.checked.append(msg.transaction_id)
        return self.check


def test_a_consumer_start_that_failed_is_tried_again_by_the_next_start() -> None:
    consumer = SimpleConsumer(
        "audit", {"orders": "*"}, "http://127.0.0.1:9", retry=RetryPolicy(retry_seconds=0)
    )
    for _ in range(2):
        with pytest.raises(CoordinatorUnavailable):
            consumer.start()


@pytest.mark.anyio
async def test_async_starts_that_failed_are_tried_again_by_the_next_start() -> None:
    nowhere, once = "http://127.0.0.1:9", RetryPolicy(retry_seconds=0)
    listener = AsyncScripted(execute=COMMIT, check=COMMIT)
    clients = [
        AsyncTransactionProducer(GROUP, listener, nowhere, retry=once),
        AsyncSimpleConsumer("audit", {"orders": "*"}, nowhere, retry=once),
    ]
    for client in clients:
        for _ in range(2):
            with pytest.raises(CoordinatorUnavailable):
                await client.start()


@pytest.mark.anyio
async def test_async_producer_and_consumers(server: LiveServer, db: psycopg.Connection) -> None:
    pushed: list[str] = []

    async def on_message(message: ReceivedMessage) -> None:
        pushed.append(message.text)

    async with (
        AsyncSimpleConsumer("audit", {"orders": "*"}, server.url, wait_seconds=2) as simple,
        AsyncPushConsumer("mailer", {"orders": "*"}, on_message, server.url, wait_seconds=1),
    ):
        listener = AsyncScripted(execute=COMMIT, check=COMMIT)
        async with AsyncTransactionProducer(
            GROUP, listener, server.url, check_wait_seconds=1
        ) as producer:
            direct = await producer.send_message_in_transaction(Message("orders", "direct"))
            listener.execute = UNKNOWN
            checked = await producer.send_message_in_transaction(Message("orders", "checked"))
            assert (direct.local_state, checked.local_state) == (COMMIT, UNKNOWN)
            for _ in range(200):
                state = db.execute(
                    "SELECT state FROM messages WHERE transaction_id = %s",
                    (checked.transaction_id,),
                ).fetchone()
                if state == ("committed",):
                    break
                await asyncio.sleep(0.05)
            assert state == ("committed",)
            assert checked.transaction_id in listener.checked

        received: list[str] = []
        for _ in range(20):
            batch = await simple.receive(10, wait_seconds=1)
            for message in batch:
                received.append(message.text)
                await simple.ack(message)
            if len(received) == 2:
                break
        assert sorted(received) == ["checked", "direct"]
        for _ in range(100):
            if len(pushed) == 2:
                break
            await asyncio.sleep(0.05)
        assert sorted(pushed) == ["checked", "direct"]
