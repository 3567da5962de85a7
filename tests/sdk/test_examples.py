"""The examples/ programs work as their docstrings say (their commands, as
docs/sdk.md gives them, in test_docs_and_examples.py)."""

from __future__ import annotations

import logging

import psycopg
import pytest

from coordinator.client import Message, PushConsumer, TransactionProducer
from examples.orders_consumer import GROUP as INVOICING
from examples.orders_consumer import parse_order, printing_listener
from examples.orders_service import place_orders, prepare_schema
from tests.conftest import LiveServer
from tests.sdk.conftest import eventually
from tests.sdk.test_producer import COMMIT, ScriptedListener


def test_orders_service_and_consumer(
    server: LiveServer, database_url: str, db: psycopg.Connection
) -> None:
    prepare_schema(database_url)
    invoices: list[str] = []
    with PushConsumer(
        INVOICING, {"orders": "created"}, printing_listener(invoices.append), server.url
    ):
        placed = place_orders(server.url, database_url, 3)
        eventually(lambda: len(invoices) == 3)
    assert {line.split()[1] for line in invoices} == {order["id"] for order in placed}
    assert db.execute("SELECT count(*) FROM orders").fetchone() == (3,)


def test_the_orders_consumer_logs_and_acks_a_message_that_is_not_an_order(
    server: LiveServer, db: psycopg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    invoices: list[str] = []
    with (
        caplog.at_level(logging.WARNING, logger="orders_consumer"),
        PushConsumer(
            INVOICING, {"orders": "created"}, printing_listener(invoices.append), server.url
        ),
        TransactionProducer("order-svc", ScriptedListener(), server.url) as producer,
    ):
        producer.listener.execute = COMMIT  # type: ignore[attr-defined]
        for body in ("order 1001 created", b"\xff\xfe", "order-7 ada 1999"):
            producer.send_message_in_transaction(Message("orders", body, tags="created"))
        eventually(lambda: invoices and len(_skipped(caplog)) == 2)
        # Acked at once, not failed into redeliveries.
        eventually(
            lambda: (
                db.execute(
                    "SELECT count(*) FROM deliveries WHERE consumer_group = %s", (INVOICING,)
                ).fetchone()
                == (0,)
            )
        )
    assert invoices == ["invoice order-7 for ada: 19.99"]
    assert db.execute("SELECT count(*) FROM dead_letters").fetchone() == (0,)


def _skipped(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "skipped message" in r.getMessage()]


@pytest.mark.parametrize(
    "body", [b"order 1001 created", b"order-7 ada", b"a b c d", b"\xff 1 2", b""]
)
def test_what_is_not_an_order_body_parses_to_none(body: bytes) -> None:
    assert parse_order(body) is None
