"""The consumer inbox as plain SQL with the official RocketMQ 5 Python client:
examples/rocketmq_inbox_consumer.py against a coordinator's gRPC door.

The example commits the first order without acking it, as if its consumer
died in between; the redelivery must be skipped and acked, and every order
recorded once in the consumer's own database.
"""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest

from bench.server import free_port
from coordinator.config import Settings
from tests.conftest import LiveServer
from tests.rocketmq_python_client import REPO

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("own_home")]


def test_the_rocketmq_inbox_example_records_each_order_once(
    database_url: str, empty_database: str, db: psycopg.Connection
) -> None:
    settings = Settings(grpc_port=free_port())
    with LiveServer(database_url, settings):
        run = subprocess.run(
            [
                sys.executable,
                "examples/rocketmq_inbox_consumer.py",
                f"127.0.0.1:{settings.grpc_port}",
                empty_database,
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            start_new_session=True,
        )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert "processed 'order 1' (delivery attempt 1)" in lines, run.stdout
    assert "skipped 'order 1', a duplicate (delivery attempt 2)" in lines, run.stdout
    assert lines[-1] == "all 3 orders recorded once"
    with psycopg.connect(empty_database) as consumer_db:
        bodies = [row[0] for row in consumer_db.execute("SELECT body FROM example_orders")]
        inbox = consumer_db.execute("SELECT count(*) FROM rocketmq_inbox").fetchone()
    assert sorted(bodies) == ["order 1", "order 2", "order 3"]
    assert inbox == (3,)
    # Every delivery acked.
    assert db.execute(
        "SELECT count(*) FROM deliveries WHERE consumer_group = 'rocketmq-inbox-example-consumers'"
    ).fetchone() == (0,)
