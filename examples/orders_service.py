"""An orders service: each order and its "order created" message, atomically.

The order row and a barrier row are written in ONE transaction of the
service's own database; the half message is sent before and ended after.
If the service dies in between, the coordinator's check-back is answered by
the barrier table with no code of ours: the message is delivered if and only
if the order was committed.

From the repository's root, with the coordinator running:

    .venv/bin/python examples/orders_service.py --orders 5 [--endpoint URL] [--database-url URL]

Without --database-url (or ORDERS_DATABASE_URL) the orders live in an
embedded PostgreSQL under ./.orders-data/.
"""

from __future__ import annotations

import argparse
import os
import random
import uuid
from pathlib import Path
from typing import Any

import psycopg

from coordinator.client import (
    Barrier,
    BarrierTransactionListener,
    Message,
    TransactionProducer,
)

GROUP = "orders-service"
TOPIC = "orders"
SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    id text PRIMARY KEY,
    customer text NOT NULL,
    amount_cents integer NOT NULL CHECK (amount_cents > 0),
    transaction_id text NOT NULL UNIQUE
)
"""


def orders_database(url: str | None) -> str:
    if url:
        return url
    from coordinator.db.embedded import start_embedded

    return start_embedded(Path(".orders-data"), database="orders")


def prepare_schema(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        Barrier().create_table(conn)
        conn.execute(SCHEMA)


def insert_order(conn: psycopg.Connection, msg: Message, order: dict[str, Any]) -> None:
    """The local transaction's business write (the barrier row is already in)."""
    conn.execute(
        "INSERT INTO orders (id, customer, amount_cents, transaction_id) VALUES (%s, %s, %s, %s)",
        (order["id"], order["customer"], order["amount_cents"], msg.transaction_id),
    )


def place_orders(endpoint: str, database_url: str, count: int) -> list[dict[str, Any]]:
    listener = BarrierTransactionListener(database_url, insert_order)
    placed = []
    with TransactionProducer(GROUP, listener, endpoint) as producer:
        for _ in range(count):
            order = {
                "id": f"order-{uuid.uuid4().hex[:8]}",
                "customer": random.choice(["ada", "grace", "linus"]),
                "amount_cents": random.randint(100, 10_000),
            }
            msg = Message(
                topic=TOPIC,
                tags="created",
                keys=[order["id"]],
                body=f"{order['id']} {order['customer']} {order['amount_cents']}",
            )
            result = producer.send_message_in_transaction(msg, order)
            print(
                f"{order['id']}: local transaction {result.local_state}, "
                f"message {result.message_id}"
            )
            placed.append({**order, "state": result.local_state})
    return placed


def main() -> None:
    parser = argparse.ArgumentParser(description="Place orders with transactional messages.")
    parser.add_argument("--endpoint", default="http://127.0.0.1:8080")
    parser.add_argument("--database-url", default=os.environ.get("ORDERS_DATABASE_URL"))
    parser.add_argument("--orders", type=int, default=5)
    args = parser.parse_args()
    database_url = orders_database(args.database_url)
    prepare_schema(database_url)
    place_orders(args.endpoint, database_url, args.orders)


if __name__ == "__main__":
    main()
