"""The barrier helper answering real check-backs: committed, rolled back, still running."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from coordinator.client import (
    Barrier,
    BarrierTransactionListener,
    LocalTransactionState,
    Message,
    TransactionProducer,
)
from tests.conftest import LiveServer
from tests.sdk.conftest import eventually

GROUP = "orders-service"


class LostEndListener(BarrierTransactionListener):
    """Reports UNKNOWN whatever happened, as if the end request were lost:
    only the barrier can tell the check-back what the local transaction did."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checks_started: list[float] = []
        self.local_finished: list[float] = []

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        super().execute_local_transaction(msg, arg)
        self.local_finished.append(time.monotonic())
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg: Message) -> LocalTransactionState:
        self.checks_started.append(time.monotonic())
        return super().check_local_transaction(msg)


def place_order(conn: psycopg.Connection, msg: Message, arg: dict) -> None:
    conn.execute(
        "INSERT INTO orders (id, transaction_id) VALUES (%s, %s)", (arg["id"], msg.transaction_id)
    )
    time.sleep(arg.get("hold", 0))  # a slow local transaction keeps its barrier row locked
    if arg.get("fail"):
        raise RuntimeError("payment declined")


@pytest.fixture
def orders_db(db: psycopg.Connection) -> psycopg.Connection:
    Barrier().create_table(db)
    db.execute("CREATE TABLE orders (id text PRIMARY KEY, transaction_id text NOT NULL)")
    return db


def _state(db: psycopg.Connection, transaction_id: str) -> str:
    return db.execute(
        "SELECT state FROM messages WHERE transaction_id = %s", (transaction_id,)
    ).fetchone()[0]


@pytest.mark.parametrize(
    ("order", "expected_state", "orders"),
    [
        ({"id": "o-1"}, "committed", [("o-1",)]),
        ({"id": "o-2", "fail": True}, "rolled_back", []),
        ({"id": "o-3", "hold": 2.0}, "committed", [("o-3",)]),
    ],
    ids=["committed", "rolled-back", "still-running"],
)
def test_check_backs_answer_themselves_from_the_barrier(
    server: LiveServer,
    database_url: str,
    orders_db: psycopg.Connection,
    order: dict,
    expected_state: str,
    orders: list,
) -> None:
    listener = LostEndListener(database_url, place_order)
    with TransactionProducer(GROUP, listener, server.url, check_wait_seconds=0.5) as producer:
        msg = Message("orders", f"order {order['id']}")
        sending = threading.Thread(target=producer.send_message_in_transaction, args=(msg, order))
        sending.start()
        eventually(lambda: msg.transaction_id is not None)
        eventually(lambda: _state(orders_db, msg.transaction_id) == expected_state)
        sending.join()

    assert orders_db.execute("SELECT id FROM orders").fetchall() == orders
    barrier_row = orders_db.execute(
        "SELECT outcome FROM coordinator_barrier WHERE transaction_id = %s", (msg.transaction_id,)
    ).fetchone()
    assert barrier_row == ("committed" if expected_state == "committed" else "rolled_back",)
    if order.get("hold"):
        # the check-back arrived while the local transaction still ran, and waited for it
        assert listener.checks_started[0] < listener.local_finished[0]
