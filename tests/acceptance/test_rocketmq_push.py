"""The official Python client's PushConsumer, standard and FIFO, against two coordinator nodes.

Each test starts two `coordinator serve --grpc-port` nodes on one database
and drives `rocketmq-python-client` in subprocesses
(tests/rocketmq_python_client.py): a transactional `Producer` on the first
node, and two PushConsumers of one group, one on the second node and one
whose endpoints list both. Their listeners print each message they are
given (a `consumed` event) and fail the messages whose body says so, as
often as the test asks.

What must hold: each message is consumed successfully exactly once by the
group; a listener failure brings the message back with a higher delivery
attempt after the group's backoff (1 s for the first); a committed
transaction is delivered, a rolled back one never, a check-back resolved one
once; a FIFO group gets each message group in order, one message at a time,
and dead-letters a message after its max delivery attempts.

Every process is stopped when its block ends, also on failure; every wait
is bounded.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.acceptance.test_rocketmq_python import (
    QUIET,
    WITHIN,
    eventually,
    grpc_coordinator,
    run_example,
    unique,
)
from tests.processes import ServeProcess
from tests.rocketmq_python_client import (
    ClientProcess,
    producer_process,
    push_consumer_process,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("own_home")]

FAIL = "fail-"  # a message whose body starts with it fails in the listener


@contextmanager
def two_nodes(database_url: str, workdir: Path) -> Iterator[list[tuple[ServeProcess, str]]]:
    """Two coordinator nodes with their gRPC doors on one database."""
    with (
        grpc_coordinator(database_url, workdir, name="node-a") as first,
        grpc_coordinator(database_url, workdir, name="node-b") as second,
    ):
        yield [first, second]


def push_settings(consumer: ClientProcess) -> dict[str, Any]:
    """What the consumer made of the server's answer to its Settings (printed after start)."""
    return consumer.wait_for(lambda r: r.get("event") == "push_settings", 10, "push settings")


def successes(consumers: list[ClientProcess]) -> list[dict[str, Any]]:
    return [
        event
        for consumer in consumers
        for event in consumer.events("consumed")
        if event["result"] == "success"
    ]


def consumed(consumers: list[ClientProcess], message_id: str) -> list[dict[str, Any]]:
    """Every time the group's listeners were given `message_id`, in the order they began."""
    events = [
        event
        for consumer in consumers
        for event in consumer.events("consumed")
        if event["message_id"] == message_id
    ]
    return sorted(events, key=lambda event: event["began"])


def wait_consumed(consumers: list[ClientProcess], message_ids: list[str]) -> None:
    def done() -> bool:
        succeeded = {event["message_id"] for event in successes(consumers)}
        return succeeded >= set(message_ids)

    try:
        eventually(done, "every message consumed", WITHIN)
    except AssertionError:
        raise AssertionError("\n".join(consumer.diagnostics() for consumer in consumers)) from None


def count(db: psycopg.Connection, table: str, group: str) -> int:
    row = db.execute(
        f"SELECT count(*) FROM {table} WHERE consumer_group = %s",
        (group,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_push_consumers_on_two_nodes_consume_each_message_once_and_retry_after_the_backoff(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    topic, group = unique("orders"), unique("shipping")
    with ExitStack() as stack:
        (_, first), (_, second) = stack.enter_context(two_nodes(database_url, tmp_path))
        consumers = [
            stack.enter_context(
                push_consumer_process(tmp_path, "push-b", second, group, topic, fail_prefix=FAIL)
            ),
            stack.enter_context(
                push_consumer_process(
                    tmp_path, "push-ab", f"{first};{second}", group, topic, fail_prefix=FAIL
                )
            ),
        ]
        for consumer in consumers:
            assert consumer.started["settings_acknowledged"]
            assert push_settings(consumer)["fifo"] is False
        producer = stack.enter_context(
            producer_process(tmp_path, "producer", first, [topic], "commit")
        )

        normal = [producer.call("send", topic=topic, body=f"normal {n}") for n in range(4)]
        committed = producer.call("send", topic=topic, body="committed", transaction="commit")
        rolled_back = producer.call("send", topic=topic, body="rolled back", transaction="rollback")
        # Left open: the check-back asks the producer's checker, which commits.
        checked = producer.call("send", topic=topic, body="checked", transaction="open")
        failing = producer.call("send", topic=topic, body=f"{FAIL}once")
        wanted = [m["message_id"] for m in [*normal, committed, checked, failing]]

        wait_consumed(consumers, wanted)
        time.sleep(QUIET)  # nothing more comes: no message twice, no rolled back one

        succeeded = Counter(event["message_id"] for event in successes(consumers))
        assert succeeded == Counter(wanted), "each message consumed once"
        assert consumed(consumers, rolled_back["message_id"]) == []
        assert [e["message_id"] for e in producer.events("check")] == [checked["message_id"]]

        first_try, retry = consumed(consumers, failing["message_id"])
        assert (first_try["result"], first_try["delivery_attempt"]) == ("failure", 1)
        assert (retry["result"], retry["delivery_attempt"]) == ("success", 2)
        # The group's backoff before the first redelivery is 1 s.
        assert retry["began"] - first_try["ended"] >= 0.9
        for message_id in wanted[:-1]:
            (only,) = consumed(consumers, message_id)
            assert only["delivery_attempt"] == 1

        assert count(db, "deliveries", group) == 0
        assert count(db, "dead_letters", group) == 0


def test_fifo_push_consumers_keep_each_message_group_in_order_one_at_a_time(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    topic, group = unique("ledger"), unique("accounting")
    with ExitStack() as stack:
        (node_a, first), (_, second) = stack.enter_context(two_nodes(database_url, tmp_path))
        # A FIFO group is made over HTTP (a gRPC client cannot ask for it).
        made = httpx.put(
            f"{node_a.url}/v1/consumer-groups/{group}/subscriptions/{topic}",
            json={"expression": "*", "fifo": True, "max_delivery_attempts": 2},
            timeout=30,
        )
        assert made.status_code == 201, made.text
        consumers = [
            stack.enter_context(
                push_consumer_process(
                    tmp_path,
                    name,
                    endpoint,
                    group,
                    topic,
                    fail_prefix=FAIL,
                    fail_times=-1,
                    consume_ms=100,
                )
            )
            for name, endpoint in [("fifo-b", second), ("fifo-ab", f"{first};{second}")]
        ]
        for consumer in consumers:
            assert push_settings(consumer)["fifo"] is True
        producer = stack.enter_context(
            producer_process(tmp_path, "producer", first, [topic], "commit")
        )

        sent: dict[str, list[str]] = {"g1": [], "g2": []}
        for n in range(4):
            for message_group in sent:
                # g2's second message always fails: after its 2 attempts it is
                # dead-lettered, and the rest of g2 goes on.
                body = f"{FAIL}{message_group}" if (message_group, n) == ("g2", 1) else f"{n}"
                answer = producer.call("send", topic=topic, body=body, message_group=message_group)
                sent[message_group].append(answer["message_id"])
        buried = sent["g2"][1]
        wanted = [m for ids in sent.values() for m in ids if m != buried]

        wait_consumed(consumers, wanted)
        eventually(lambda: count(db, "dead_letters", group) == 1, "the failing message buried")
        time.sleep(QUIET)

        succeeded = Counter(event["message_id"] for event in successes(consumers))
        assert succeeded == Counter(wanted)
        attempts = consumed(consumers, buried)
        assert [event["result"] for event in attempts] == ["failure", "failure"]
        for message_group, ids in sent.items():
            events = sorted(
                (e for c in consumers for e in c.events("consumed") if e["message_id"] in ids),
                key=lambda event: event["began"],
            )
            order = list(dict.fromkeys(event["message_id"] for event in events))
            assert order == ids, f"{message_group} consumed out of order"
            for earlier, later in itertools.pairwise(events):
                assert later["began"] >= earlier["ended"], f"{message_group}: two in flight"
        assert count(db, "deliveries", group) == 0


def test_the_push_consumer_example(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    run = run_example(database_url, tmp_path, "rocketmq_push_consumer.py")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "failed 'order 2' (delivery attempt 1)" in run.stdout, run.stdout
    assert "consumed 'order 2' (delivery attempt 2)" in run.stdout, run.stdout
    assert "all 3 consumed" in run.stdout, run.stdout
    assert count(db, "deliveries", "rocketmq-push-example-consumers") == 0
