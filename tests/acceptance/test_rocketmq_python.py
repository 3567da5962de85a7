"""The official RocketMQ 5 Python client, unmodified, against `coordinator serve --grpc-port`.

Each test starts a coordinator with its gRPC door on a database of its own,
and drives `rocketmq-python-client` in subprocesses (tests/rocketmq_python_client.py):
a transactional `Producer` whose `TransactionChecker` answers check-backs,
and `SimpleConsumer`s. What the client is told is checked against the
database (messages, deliveries, subscriptions), with plain SQL.

The mapping under test: a message sent over gRPC has its topic as producer
group; a producer whose Telemetry stream announced topic T is a check-back
target of T, and is asked with `recover_orphaned_transaction_command`; a
SimpleConsumer's group and expression are a subscription, which only gets
what is committed after it exists: consumers start before producers send.

Every process is stopped when its block ends, also on failure; every wait is
bounded.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psycopg
import pytest

from bench.server import free_port
from tests.processes import ServeProcess, coordinator_serve
from tests.rocketmq_python_client import (
    REPO,
    ClientError,
    ClientProcess,
    consumer_process,
    producer_process,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("own_home")]

# Check-backs within seconds: first when a half message is 1 s old, then
# every 2 s; a producer's stream is registered while it is open.
FAST_CHECKS: dict[str, object] = {
    "transaction_timeout_seconds": 1,
    "check_interval_seconds": 2,
    "check_scan_interval_seconds": 0.5,
}
WITHIN = 60.0  # seconds for anything that should happen in a few
QUIET = 4.0  # seconds of receiving nothing that prove "not delivered"

T = TypeVar("T")


@contextmanager
def grpc_coordinator(
    database_url: str,
    workdir: Path,
    grpc_port: int | None = None,
    name: str = "serve",
    **settings: object,
) -> Iterator[tuple[ServeProcess, str]]:
    """`coordinator serve` with its gRPC door; yields the server and the gRPC endpoint."""
    port = grpc_port or free_port()
    with coordinator_serve(
        database_url, workdir, name, grpc_port=port, **{**FAST_CHECKS, **settings}
    ) as server:
        endpoint = f"127.0.0.1:{port}"
        yield server, endpoint


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def eventually(probe: Callable[[], T | None], what: str, timeout: float = WITHIN) -> T:
    """The first truthy value of `probe`, polled for at most `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s (last: {value!r})")
        time.sleep(0.2)


def wait_subscribed(db: psycopg.Connection, group: str, topic: str) -> str:
    """The expression of the subscription the consumer's Settings made, once it exists."""
    row = eventually(
        lambda: db.execute(
            "SELECT expression FROM subscriptions WHERE consumer_group = %s AND topic = %s",
            (group, topic),
        ).fetchone(),
        f"subscription of {group} to {topic}",
    )
    return str(row[0])


def message_row(db: psycopg.Connection, message_id: str) -> dict[str, Any]:
    row = db.execute(
        "SELECT id, producer_group, topic, tags, keys, properties, convert_from(body, 'UTF8'),"
        " state, resolution_source, check_count FROM messages WHERE message_id = %s",
        (message_id,),
    ).fetchone()
    assert row is not None, f"no message {message_id} in the database"
    names = (
        "offset producer_group topic tags keys properties body state resolution_source check_count"
    )
    return dict(zip(names.split(), row, strict=True))


def wait_state(db: psycopg.Connection, message_id: str, state: str) -> dict[str, Any]:
    return eventually(
        lambda: (row := message_row(db, message_id))["state"] == state and row,
        f"message {message_id} {state}",
    )


def receive_until(
    consumer: ClientProcess, count: int, timeout: float = WITHIN, invisible: int = 30
) -> list[dict[str, Any]]:
    """Receive (without acking) until `count` messages came, or fail after `timeout` s."""
    messages: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(messages) < count:
        if time.monotonic() > deadline:
            raise AssertionError(
                f"received {len(messages)} of {count} within {timeout:g} s: {messages}\n"
                f"{consumer.diagnostics()}"
            )
        messages += consumer.call("receive", max=16, invisible=invisible)["messages"]
    return messages


def receive_nothing(consumer: ClientProcess, seconds: float = QUIET) -> None:
    """Receive for `seconds`: every answer must be empty."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        messages = consumer.call("receive", max=16, invisible=30)["messages"]
        assert messages == [], f"received what should not be delivered: {messages}"


def deliveries(db: psycopg.Connection, group: str) -> int:
    row = db.execute(
        "SELECT count(*) FROM deliveries WHERE consumer_group = %s", (group,)
    ).fetchone()
    assert row is not None
    return int(row[0])


# --- sending and receiving ---------------------------------------------------------------


def test_normal_message_is_received_acked_and_not_received_again(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    topic, group = unique("orders"), unique("billing")
    with (
        grpc_coordinator(database_url, tmp_path) as (_, endpoint),
        consumer_process(tmp_path, "consumer", endpoint, group, topic) as consumer,
        producer_process(tmp_path, "producer", endpoint, [topic], "commit") as producer,
    ):
        assert wait_subscribed(db, group, topic) == "*"
        sent = producer.call(
            "send",
            topic=topic,
            body="order 1001 created",
            tag="created",
            keys=["order-1001"],
            properties={"region": "eu"},
        )
        assert sent["transaction_id"] in (None, "")

        [message] = receive_until(consumer, 1)
        assert message["message_id"] == sent["message_id"]
        assert message["body"] == "order 1001 created"
        assert message["tag"] == "created"
        assert message["keys"] == ["order-1001"]
        assert message["properties"] == {"region": "eu"}
        assert message["delivery_attempt"] == 1
        assert message["receipt_handle"]
        assert not message["corrupted"], "the body digest did not match the body"

        row = message_row(db, sent["message_id"])
        # A normal message needs no producer group: nobody is checked back for it.
        assert (row["state"], row["topic"]) == ("committed", topic)
        assert (row["tags"], row["keys"], row["properties"]) == (
            "created",
            ["order-1001"],
            {"region": "eu"},
        )

        consumer.call("ack", message_id=message["message_id"])
        assert deliveries(db, group) == 0
        receive_nothing(consumer)


def test_committed_transaction_is_received_exactly_once(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    topic, group = unique("orders"), unique("billing")
    with (
        grpc_coordinator(database_url, tmp_path) as (_, endpoint),
        consumer_process(tmp_path, "consumer", endpoint, group, topic) as consumer,
        producer_process(tmp_path, "producer", endpoint, [topic], "rollback") as producer,
    ):
        wait_subscribed(db, group, topic)
        sent = producer.call("send", topic=topic, body="paid", transaction="commit")
        assert sent["transaction_id"]

        row = message_row(db, sent["message_id"])
        assert (row["state"], row["resolution_source"]) == ("committed", "client")
        assert row["producer_group"] == topic  # RocketMQ 5 has none: the topic stands for it
        [message] = receive_until(consumer, 1)
        assert (message["message_id"], message["body"]) == (sent["message_id"], "paid")
        consumer.call("ack", message_id=message["message_id"])
        receive_nothing(consumer)
        assert producer.events("check") == [], "a committed transaction was checked back"


def test_rolled_back_transaction_is_never_received(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    topic, group = unique("orders"), unique("billing")
    with (
        grpc_coordinator(database_url, tmp_path) as (_, endpoint),
        consumer_process(tmp_path, "consumer", endpoint, group, topic) as consumer,
        producer_process(tmp_path, "producer", endpoint, [topic], "commit") as producer,
    ):
        wait_subscribed(db, group, topic)
        sent = producer.call("send", topic=topic, body="cancelled", transaction="rollback")

        row = message_row(db, sent["message_id"])
        assert (row["state"], row["resolution_source"]) == ("rolled_back", "client")
        # Longer than a check-back takes: a rolled back message is not checked either.
        receive_nothing(consumer, QUIET)
        assert deliveries(db, group) == 0
        assert producer.events("check") == [], "a rolled back transaction was checked back"
        assert message_row(db, sent["message_id"])["state"] == "rolled_back"


def test_half_message_is_invisible_until_committed(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    """Begin, send, receive nothing, then commit: received. No check-back in between."""
    topic, group = unique("orders"), unique("billing")
    with (
        grpc_coordinator(database_url, tmp_path, transaction_timeout_seconds=60) as (_, endpoint),
        consumer_process(tmp_path, "consumer", endpoint, group, topic) as consumer,
        producer_process(tmp_path, "producer", endpoint, [topic], "rollback") as producer,
    ):
        wait_subscribed(db, group, topic)
        sent = producer.call("send", topic=topic, body="half", transaction="open")
        assert message_row(db, sent["message_id"])["state"] == "prepared"
        receive_nothing(consumer, 2)
        producer.call("end", message_id=sent["message_id"], resolution="commit")
        [message] = receive_until(consumer, 1)
        assert message["message_id"] == sent["message_id"]
        assert message_row(db, sent["message_id"])["resolution_source"] == "client"


# --- check-back over Telemetry -------------------------------------------------------------


def test_open_transactions_are_resolved_by_the_producers_checker(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    """Two producers, one per topic: one checker commits, the other rolls back."""
    committing, rolling_back = unique("orders"), unique("refunds")
    group = unique("billing")
    with (
        grpc_coordinator(database_url, tmp_path) as (_, endpoint),
        consumer_process(tmp_path, "commits", endpoint, group, committing) as commits,
        consumer_process(tmp_path, "rollbacks", endpoint, group, rolling_back) as rollbacks,
        producer_process(tmp_path, "committer", endpoint, [committing], "commit") as committer,
        producer_process(tmp_path, "rollbacker", endpoint, [rolling_back], "rollback") as roller,
    ):
        assert committer.started["settings_acknowledged"], committer.diagnostics()
        assert roller.started["settings_acknowledged"], roller.diagnostics()
        wait_subscribed(db, group, committing)
        wait_subscribed(db, group, rolling_back)
        to_commit = producer_open(committer, committing, "to commit")
        to_roll_back = producer_open(roller, rolling_back, "to roll back")

        committed = wait_state(db, to_commit, "committed")
        rolled_back = wait_state(db, to_roll_back, "rolled_back")
        assert committed["resolution_source"] == "check"
        assert rolled_back["resolution_source"] == "check"
        assert committed["check_count"] >= 1 and rolled_back["check_count"] >= 1

        # The checker saw the half message as it was sent.
        check = committer.events("check")[0]
        assert (check["message_id"], check["topic"], check["body"]) == (
            to_commit,
            committing,
            "to commit",
        )
        # Each topic's check-back went to its own producer only.
        assert {c["message_id"] for c in committer.events("check")} == {to_commit}
        assert {c["message_id"] for c in roller.events("check")} == {to_roll_back}

        [message] = receive_until(commits, 1)
        assert message["message_id"] == to_commit
        commits.call("ack", message_id=to_commit)
        receive_nothing(rollbacks)
        assert deliveries(db, group) == 0


def producer_open(producer: ClientProcess, topic: str, body: str) -> str:
    """Begin a transaction, send its half message, end nothing: the message id."""
    return str(producer.call("send", topic=topic, body=body, transaction="open")["message_id"])


def test_checker_answering_unknown_is_checked_again(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    """The client sends resolution 0 for UNSPECIFIED: the message stays prepared, asked again."""
    topic = unique("orders")
    with (
        grpc_coordinator(database_url, tmp_path) as (_, endpoint),
        producer_process(tmp_path, "producer", endpoint, [topic], "unknown") as producer,
    ):
        message_id = producer_open(producer, topic, "undecided")
        producer.wait_for(
            lambda r: r.get("event") == "check" and r["message_id"] == message_id,
            WITHIN,
            "first check-back",
        )
        # Answer the next check with a commit: only a second check can resolve it.
        producer.call("answer", message_id=message_id, answer="commit")
        row = wait_state(db, message_id, "committed")
        assert row["resolution_source"] == "check"
        assert row["check_count"] >= 2
        assert [c["answer"] for c in producer.events("check")][:2] == ["unknown", "commit"]


def test_killed_producer_transaction_is_resolved_by_another_producer_process(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    topic, group = unique("orders"), unique("billing")
    # The first check no earlier than 3 s: the first producer is dead by then.
    with (
        grpc_coordinator(database_url, tmp_path, transaction_timeout_seconds=3) as (_, endpoint),
        consumer_process(tmp_path, "consumer", endpoint, group, topic) as consumer,
    ):
        wait_subscribed(db, group, topic)
        with producer_process(tmp_path, "doomed", endpoint, [topic], "unknown") as doomed:
            message_id = producer_open(doomed, topic, "orphan")
            doomed.kill()
        assert message_row(db, message_id)["state"] == "prepared"
        assert doomed.events("check") == []

        with producer_process(tmp_path, "heir", endpoint, [topic], "commit") as heir:
            row = wait_state(db, message_id, "committed")
            assert row["resolution_source"] == "check"
            assert [c["message_id"] for c in heir.events("check")] == [message_id]
        [message] = receive_until(consumer, 1)
        assert (message["message_id"], message["body"]) == (message_id, "orphan")
        consumer.call("ack", message_id=message_id)


# --- consuming -------------------------------------------------------------------------------


def test_change_invisible_duration_redelivers_with_a_higher_attempt(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    topic, group = unique("orders"), unique("billing")
    with (
        grpc_coordinator(database_url, tmp_path) as (_, endpoint),
        consumer_process(tmp_path, "consumer", endpoint, group, topic, await_seconds=1) as consumer,
        producer_process(tmp_path, "producer", endpoint, [topic], "commit") as producer,
    ):
        wait_subscribed(db, group, topic)
        sent = producer.call("send", topic=topic, body="slow work")
        [first] = receive_until(consumer, 1, invisible=60)
        assert first["delivery_attempt"] == 1
        receive_nothing(consumer, 2)  # invisible for 60 s

        changed = consumer.call("change_invisible", message_id=sent["message_id"], seconds=1)
        assert changed["receipt_handle"], "ChangeInvisibleDuration gave no receipt handle"
        assert changed["receipt_handle"] != first["receipt_handle"]

        [again] = receive_until(consumer, 1, timeout=20)
        assert again["message_id"] == sent["message_id"]
        assert again["delivery_attempt"] == 2
        assert again["receipt_handle"] not in (first["receipt_handle"], changed["receipt_handle"])
        consumer.call("ack", message_id=sent["message_id"])
        assert deliveries(db, group) == 0
        receive_nothing(consumer, 2)


def test_tag_filter(database_url: str, db: psycopg.Connection, tmp_path: Path) -> None:
    topic = unique("orders")
    tag_a, everything = unique("tag-a"), unique("all")
    with (
        grpc_coordinator(database_url, tmp_path) as (_, endpoint),
        consumer_process(tmp_path, "a", endpoint, tag_a, topic, expression="TagA") as only_a,
        consumer_process(tmp_path, "all", endpoint, everything, topic) as all_tags,
        producer_process(tmp_path, "producer", endpoint, [topic], "commit") as producer,
    ):
        assert wait_subscribed(db, tag_a, topic) == "TagA"
        wait_subscribed(db, everything, topic)
        sent = {
            producer.call("send", topic=topic, body=body, tag=tag, **extra)["message_id"]: tag
            for body, tag, extra in [
                ("a1", "TagA", {}),
                ("b1", "TagB", {}),
                ("a2", "TagA", {"transaction": "commit"}),
                ("b2", "TagB", {"transaction": "commit"}),
            ]
        }
        a_messages = receive_until(only_a, 2)
        assert sorted(m["message_id"] for m in a_messages) == sorted(
            message_id for message_id, tag in sent.items() if tag == "TagA"
        )
        assert {m["tag"] for m in a_messages} == {"TagA"}
        for message in a_messages:
            only_a.call("ack", message_id=message["message_id"])
        receive_nothing(only_a)

        all_messages = receive_until(all_tags, 4)
        assert sorted(m["message_id"] for m in all_messages) == sorted(sent)
        assert deliveries(db, tag_a) == 0


def test_sql92_filter(database_url: str, db: psycopg.Connection, tmp_path: Path) -> None:
    topic = unique("orders")
    big_eu, bad = unique("big-eu"), unique("bad")
    condition = "amount > 100 AND region IN ('eu', 'uk') AND TAGS <> 'test'"
    with (
        grpc_coordinator(database_url, tmp_path) as (_, endpoint),
        consumer_process(tmp_path, "sql", endpoint, big_eu, topic, condition, sql92=True) as sql,
        consumer_process(tmp_path, "bad", endpoint, bad, topic, "amount >", sql92=True) as wrong,
        producer_process(tmp_path, "producer", endpoint, [topic], "commit") as producer,
    ):
        assert wait_subscribed(db, big_eu, topic) == condition
        sent = {
            body: producer.call(
                "send", topic=topic, body=body, tag=tag, properties=properties, **extra
            )["message_id"]
            for body, tag, properties, extra in [
                ("big eu", "paid", {"amount": "150", "region": "eu"}, {}),
                ("small eu", "paid", {"amount": "15", "region": "eu"}, {}),
                ("big us", "paid", {"amount": "150", "region": "us"}, {}),
                ("no amount", "paid", {"region": "uk"}, {}),
                ("big uk", "paid", {"amount": "1e3", "region": "uk"}, {"transaction": "commit"}),
                ("test", "test", {"amount": "150", "region": "eu"}, {}),
            ]
        }
        received = receive_until(sql, 2)
        assert sorted(m["message_id"] for m in received) == sorted([sent["big eu"], sent["big uk"]])
        receive_nothing(sql, 2)

        # A bad expression: refused at once, with the position of the error.
        with pytest.raises(ClientError) as refused:
            wrong.call("receive", max=1)
        assert "position 9" in str(refused.value)
        assert db.execute(
            "SELECT count(*) FROM subscriptions WHERE consumer_group = %s", (bad,)
        ).fetchone() == (0,)


# --- a coordinator restart -------------------------------------------------------------------


# How long the registration of a producer whose stream died with its
# coordinator stays live: shorter than the first check-back after the restart.
# Checks addressed to a registration that is still live reach nobody and yet
# count, as for an HTTP producer that died (docs/rocketmq-clients.md).
REGISTRATION_GONE_BEFORE_THE_FIRST_CHECK = 2.0


def test_restarted_coordinator_resolves_pending_half_messages_once_a_producer_is_back(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    """Half messages pending across a coordinator restart wait, unspent, for a producer.

    The first producer process outlives the coordinator, SIGKILLed: its
    Telemetry stream breaks with it and the Python client opens it again only
    at its next 300 s settings sync, but it heartbeats the new coordinator
    every 10 s. While no producer stream is open the messages stay prepared,
    and their check budget (check_max 2, a check every second) is not spent:
    they are not discarded. A new producer process of the topic then resolves
    them. The dead coordinator never removed the first producer's
    registration: it stays live for producer_ttl_seconds after its stream's
    last poll, shorter here than the first check after the restart.
    """
    producer_ttl_seconds = REGISTRATION_GONE_BEFORE_THE_FIRST_CHECK
    topic = unique("orders")
    grpc_port = free_port()
    check_max = 2
    # No check before the coordinator is killed; afterwards a due check every second.
    settings: dict[str, object] = {
        "transaction_timeout_seconds": 5,
        "check_interval_seconds": 1,
        "check_max": check_max,
        "producer_ttl_seconds": producer_ttl_seconds,
    }
    # The first producer is entered on this stack, so that it outlives the
    # coordinator it was started against.
    with ExitStack() as outliving:
        with grpc_coordinator(database_url, tmp_path, grpc_port, "first", **settings) as (
            first,
            endpoint,
        ):
            producer = outliving.enter_context(
                producer_process(tmp_path, "before", endpoint, [topic], "commit")
            )
            producer_started = time.monotonic()
            pending = [producer_open(producer, topic, f"pending {i}") for i in range(3)]
            first.kill()
        assert {message_row(db, m)["state"] for m in pending} == {"prepared"}

        with grpc_coordinator(database_url, tmp_path, grpc_port, "second", **settings) as (
            _,
            endpoint,
        ):
            # Until every message was claimed more often than check_max (or left
            # prepared, which fails below) ...
            eventually(
                lambda: claimed_more_than(db, pending, check_max),
                f"{check_max + 1} check-back claims of each pending message",
            )
            # ... and the old producer's heartbeat (every 10 s) reached the new
            # coordinator: a heartbeat is no Telemetry stream to send a check on.
            time.sleep(max(0.0, producer_started + 12 - time.monotonic()))
            rows = [message_row(db, m) for m in pending]
            assert {row["state"] for row in rows} == {"prepared"}, check_back_state(db, topic)
            assert producer.events("check") == []

            with producer_process(tmp_path, "after", endpoint, [topic], "commit") as after:
                for message_id in pending:
                    row = wait_state(db, message_id, "committed")
                    assert row["resolution_source"] == "check"
                assert sorted(c["message_id"] for c in after.events("check")) == sorted(pending)
            assert producer.events("check") == []


def claimed_more_than(db: psycopg.Connection, message_ids: list[str], claims: int) -> bool:
    """Whether each message left prepared or its check-back was claimed more than `claims` times.

    A claim either counts a check (addressed to a live instance) or a
    no-producer attempt; the message's check_requests row keeps both counts.
    """
    rows = db.execute(
        "SELECT m.state, coalesce(r.check_count, 0) + coalesce(r.no_producer_attempts, 0)"
        " FROM messages m LEFT JOIN check_requests r ON r.message_offset = m.id"
        " WHERE m.message_id = ANY(%s)",
        (message_ids,),
    ).fetchall()
    return len(rows) == len(message_ids) and all(
        state != "prepared" or total > claims for state, total in rows
    )


def check_back_state(db: psycopg.Connection, topic: str) -> str:
    """The topic's messages, check requests, history and producer registry, for a failure."""
    queries = {
        "messages": "SELECT id, state, check_count, resolution_source, next_check_at"
        " FROM messages WHERE topic = %(t)s ORDER BY id",
        "check_requests": "SELECT * FROM check_requests WHERE producer_group = %(t)s",
        "history": "SELECT h.message_offset, h.at, h.source, h.from_state, h.to_state, h.detail"
        " FROM message_history h JOIN messages m ON m.id = h.message_offset"
        " WHERE m.topic = %(t)s ORDER BY h.id",
        "producers": "SELECT *, now() AS now FROM producers WHERE producer_group = %(t)s",
    }
    return "\n".join(
        f"{name}:\n" + "\n".join(map(repr, db.execute(sql, {"t": topic}).fetchall()))
        for name, sql in queries.items()
    )


# --- HTTP and gRPC together ------------------------------------------------------------------


def test_grpc_messages_reach_an_http_consumer(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    topic, group = unique("orders"), unique("http-billing")
    with (
        grpc_coordinator(database_url, tmp_path) as (server, endpoint),
        producer_process(tmp_path, "producer", endpoint, [topic], "commit") as producer,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        subscribed = http.put(
            f"/v1/consumer-groups/{group}/subscriptions/{topic}", json={"expression": "*"}
        )
        assert subscribed.status_code == 201, subscribed.text
        normal = producer.call("send", topic=topic, body="normal", tag="created", keys=["k1"])
        committed = producer.call("send", topic=topic, body="committed", transaction="commit")
        producer.call("send", topic=topic, body="rolled back", transaction="rollback")

        received: list[dict[str, Any]] = []
        deadline = time.monotonic() + WITHIN
        while len(received) < 2 and time.monotonic() < deadline:
            answer = http.post(
                f"/v1/consumer-groups/{group}/receive",
                json={"max_messages": 16, "invisible_seconds": 30, "wait_seconds": 2},
            )
            assert answer.status_code == 200, answer.text
            received += answer.json()["messages"]
        by_id = {m["message_id"]: m for m in received}
        assert sorted(by_id) == sorted([normal["message_id"], committed["message_id"]])
        assert by_id[normal["message_id"]]["body_text"] == "normal"
        assert by_id[normal["message_id"]]["tags"] == "created"
        assert by_id[normal["message_id"]]["keys"] == ["k1"]
        assert by_id[committed["message_id"]]["producer_group"] == topic
        assert by_id[committed["message_id"]]["transaction_id"] == committed["transaction_id"]
        for message in received:
            acked = http.post(
                f"/v1/consumer-groups/{group}/ack",
                json={"receipt_handle": message["receipt_handle"]},
            )
            assert acked.status_code == 200, acked.text
        assert deliveries(db, group) == 0


def test_http_message_reaches_a_simple_consumer(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    topic, group = unique("orders"), unique("billing")
    with (
        grpc_coordinator(database_url, tmp_path) as (server, endpoint),
        consumer_process(tmp_path, "consumer", endpoint, group, topic) as consumer,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        wait_subscribed(db, group, topic)
        normal = http.post(
            "/v1/messages",
            json={
                "topic": topic,
                "tags": "created",
                "keys": ["order-7"],
                "properties": {"region": "eu"},
                "body_text": "from http",
            },
        )
        assert normal.status_code == 201, normal.text
        half = http.post(
            "/v1/transactions",
            json={"topic": topic, "producer_group": "order-svc", "body_text": "half from http"},
        )
        assert half.status_code == 201, half.text
        ended = http.post(
            f"/v1/transactions/{half.json()['transaction_id']}/end",
            json={"producer_group": "order-svc", "resolution": "commit"},
        )
        assert ended.status_code == 200, ended.text

        messages = receive_until(consumer, 2)
        by_id = {m["message_id"]: m for m in messages}
        assert sorted(by_id) == sorted([normal.json()["message_id"], half.json()["message_id"]])
        first = by_id[normal.json()["message_id"]]
        assert (first["body"], first["tag"], first["keys"], first["properties"]) == (
            "from http",
            "created",
            ["order-7"],
            {"region": "eu"},
        )
        assert not first["corrupted"]
        assert by_id[half.json()["message_id"]]["body"] == "half from http"
        for message_id in by_id:
            consumer.call("ack", message_id=message_id)
        assert deliveries(db, group) == 0


# --- the example -----------------------------------------------------------------------------


def run_example(database_url: str, workdir: Path, script: str) -> subprocess.CompletedProcess[str]:
    """`examples/<script>` run as a user would, against a gRPC coordinator of its own."""
    with grpc_coordinator(database_url, workdir) as (_, endpoint):
        return subprocess.run(
            [sys.executable, f"examples/{script}", endpoint],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            start_new_session=True,
        )


def test_the_rocketmq_client_example(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    run = run_example(database_url, tmp_path, "rocketmq_client_producer.py")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "committed" in run.stdout and "acked" in run.stdout, run.stdout
    rows = db.execute(
        "SELECT state, resolution_source FROM messages WHERE topic = 'rocketmq-example'"
    ).fetchall()
    assert rows == [("committed", "client")]


def test_a_delay_message_arrives_at_its_time_and_another_is_recalled(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    topic, group = unique("timers"), unique("billing")
    with (
        grpc_coordinator(database_url, tmp_path) as (_, endpoint),
        consumer_process(tmp_path, "consumer", endpoint, group, topic) as consumer,
        producer_process(tmp_path, "producer", endpoint, [topic], "commit") as producer,
    ):
        wait_subscribed(db, group, topic)
        due = int(time.time() * 1000) + 2000  # milliseconds, as the client documents
        sent = producer.call("send", topic=topic, body="soon", delivery_timestamp=due)
        later = producer.call("send", topic=topic, body="later", delivery_timestamp=due + 3_600_000)
        assert sent["recall_handle"] and later["recall_handle"]
        recalled = producer.call("recall", topic=topic, handle=later["recall_handle"])
        assert recalled["message_id"] == later["message_id"]
        [message] = receive_until(consumer, 1)
        assert time.time() * 1000 >= due
        assert message["body"] == "soon" and message["delivery_timestamp"] == due
        consumer.call("ack", message_id=message["message_id"])
        refused = producer.call("recall", topic=topic, handle=sent["recall_handle"])
        assert "already delivered" in refused["error"]
        history = db.execute(
            "SELECT h.detail FROM message_history h JOIN messages m ON m.id = h.message_offset"
            " WHERE m.message_id = %s ORDER BY h.id",
            (later["message_id"],),
        ).fetchall()
        assert history[-1] == ("recalled",)
