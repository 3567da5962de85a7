"""The examples/ programs work as their docstrings say."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psycopg

from coordinator.client import PushConsumer
from examples.orders_consumer import GROUP as INVOICING
from examples.orders_consumer import printing_listener
from examples.orders_service import place_orders, prepare_schema
from tests.conftest import LiveServer
from tests.sdk.conftest import eventually

REPO = Path(__file__).resolve().parents[2]


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


def test_the_rocketmq_transaction_producer_example(
    server: LiveServer, db: psycopg.Connection
) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "examples/transaction_producer.py",
            "--endpoint",
            server.url,
            "--seconds",
            "4",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("local state unknown") == 10
    time.sleep(0.5)
    states = dict(
        db.execute(
            "SELECT convert_from(body, 'UTF8'), state FROM messages WHERE topic = 'TopicTest'"
        ).fetchall()
    )
    # index % 3: 0 stays unknown (still prepared), 1 commits, 2 rolls back
    for i in range(10):
        expected = ["prepared", "committed", "rolled_back"][i % 3]
        assert states[f"Hello RocketMQ {i}"] == expected, (i, states)
