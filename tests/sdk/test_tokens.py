"""The SDK sends its token: producers and consumers work once authentication is on."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from coordinator.client import (
    LocalTransactionState,
    Message,
    PermissionDenied,
    SimpleConsumer,
    TransactionProducer,
    Unauthenticated,
)
from coordinator.config import Settings
from tests.conftest import LiveServer
from tests.sdk.test_producer import ScriptedListener

TOPIC = "orders"


def test_producers_and_consumers_use_their_tokens(
    database_url: str, db: psycopg.Connection, issue_token: Callable[..., str]
) -> None:
    producer_token = issue_token("order-svc", produce_topics=(TOPIC,), producer_groups=("order-*",))
    consumer_token = issue_token("billing", consume_groups=("billing",), consume_topics=(TOPIC,))
    with LiveServer(database_url, Settings()) as server:
        with SimpleConsumer(
            "billing", {TOPIC: "*"}, server.url, wait_seconds=2, token=consumer_token
        ) as consumer:
            with TransactionProducer(
                "order-svc", ScriptedListener(), server.url, token=producer_token
            ) as producer:
                result = producer.send_message_in_transaction(Message(TOPIC, "order 1"))
            assert result.local_state is LocalTransactionState.COMMIT
            (received,) = consumer.receive()
            assert received.message_id == result.message_id and received.body == b"order 1"
            consumer.ack(received)

        with (
            pytest.raises(Unauthenticated, match="needs a token"),
            TransactionProducer("order-svc", ScriptedListener(), server.url) as anonymous,
        ):
            anonymous.send_message_in_transaction(Message(TOPIC, "order 2"))
        with (
            pytest.raises(PermissionDenied, match="producer group 'payment-svc'"),
            TransactionProducer(
                "payment-svc", ScriptedListener(), server.url, token=producer_token
            ) as other_group,
        ):
            other_group.send_message_in_transaction(Message(TOPIC, "order 3"))
    states = db.execute("SELECT state FROM messages ORDER BY id").fetchall()
    assert states == [("committed",)]
