"""The services' own databases: the producers' (the truth) and one per consumer group.

The producers' database holds the barrier (coordinator.client.barrier, the
table a database check source reads) and `eo_orders`, written in the same
local transaction: an order row exists exactly when its local transaction
committed. A consumer group's database holds the inbox and `orders`, with no
unique key on the order id on purpose: a handler that ran twice for one order
leaves two rows, which the verdict sees.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import psycopg

from bench.soak.truth import BARRIER

PRODUCER_ORDERS_DDL = """
CREATE TABLE IF NOT EXISTS eo_orders (
    order_id text PRIMARY KEY,
    amount bigint NOT NULL,
    transaction_id text NOT NULL,
    message_id text NOT NULL,
    run text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""

CONSUMER_ORDERS_DDL = """
CREATE TABLE IF NOT EXISTS orders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id text NOT NULL,
    amount bigint NOT NULL,
    message_id text NOT NULL,
    consumer text NOT NULL,
    run text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
)
"""


@dataclass(frozen=True)
class Order:
    order_id: str
    amount: int  # in cents

    def body(self) -> str:
        return json.dumps({"order_id": self.order_id, "amount": self.amount})

    @classmethod
    def from_body(cls, body: bytes) -> Order:
        data = json.loads(body)
        return cls(str(data["order_id"]), int(data["amount"]))


# the producers' database ------------------------------------------------------------
def create_producer_tables(url: str) -> None:
    with psycopg.connect(url) as conn:
        BARRIER.create_table(conn)
        conn.execute(PRODUCER_ORDERS_DDL)


def insert_producer_order(
    conn: psycopg.Connection, order: Order, transaction_id: str, message_id: str, run: str
) -> None:
    conn.execute(
        "INSERT INTO eo_orders (order_id, amount, transaction_id, message_id, run)"
        " VALUES (%s, %s, %s, %s, %s)",
        (order.order_id, order.amount, transaction_id, message_id, run),
    )


@dataclass(frozen=True)
class Committed:
    """An order whose local transaction committed, and the message that carried it."""

    amount: int
    message_id: str


def committed_orders(url: str, run: str) -> dict[str, Committed]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT order_id, amount, message_id FROM eo_orders WHERE run = %s", (run,)
        )
        return {order_id: Committed(int(amount), mid) for order_id, amount, mid in rows}


def barrier_disagreements(url: str, run: str, transactions: frozenset[str]) -> frozenset[str]:
    """Transaction ids of the run whose barrier row and order row disagree.

    `transactions`: every transaction id the run's producers journaled (a
    producer journals one before its barrier row). A `committed` barrier
    row without its order, or an order without its `committed` barrier row,
    would make the barrier, and so every check-back, lie.
    """
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            f"SELECT transaction_id FROM {BARRIER.table}"
            " WHERE outcome = 'committed' AND transaction_id = ANY(%s)",
            (list(transactions),),
        )
        barrier = {row[0] for row in rows}
        rows = conn.execute("SELECT transaction_id FROM eo_orders WHERE run = %s", (run,))
        orders = {row[0] for row in rows}
    return frozenset(barrier ^ orders)


# a consumer group's database ----------------------------------------------------------
def create_consumer_tables(url: str) -> None:
    with psycopg.connect(url) as conn:
        conn.execute(CONSUMER_ORDERS_DDL)


def insert_consumer_order(
    conn: psycopg.Connection, order: Order, message_id: str, consumer: str, run: str
) -> None:
    """The handler's effect: a plain insert, so a second run of it shows."""
    conn.execute(
        "INSERT INTO orders (order_id, amount, message_id, consumer, run)"
        " VALUES (%s, %s, %s, %s, %s)",
        (order.order_id, order.amount, message_id, consumer, run),
    )


def consumer_orders(url: str, run: str) -> dict[str, list[int]]:
    """Order id -> the amount of every row written for it (more than one: a duplicate)."""
    found: dict[str, list[int]] = {}
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT order_id, amount FROM orders WHERE run = %s", (run,))
        for order_id, amount in rows:
            found.setdefault(order_id, []).append(int(amount))
    return found
