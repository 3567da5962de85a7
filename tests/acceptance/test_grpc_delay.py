"""Delay messages, recall, trace context and EndTransaction's source over the gRPC
door with the raw stubs, and their trips between the gRPC and HTTP doors.

One coordinator serves the module (both doors); each test uses its own topic.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s

from coordinator.config import Settings
from tests.grpc_door import (
    OK,
    GrpcDoor,
    code,
    end_request,
    grpc_door,
    message,
    receive_request,
    receive_status,
    received_messages,
    resource,
)
from tests.own_postgres import own_postgres

pytestmark = pytest.mark.slow  # its own PostgreSQL and coordinator

TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
GROUP = "billing"


@pytest.fixture(scope="module")
def database_url_module() -> Iterator[str]:
    with own_postgres("coordinator-test-grpc-delay-") as server:
        yield server.migrated_database("delay")


@pytest.fixture(scope="module")
def door(database_url_module: str) -> Iterator[GrpcDoor]:
    with grpc_door(database_url_module, Settings(database_url=None)) as door:
        yield door


@pytest.fixture
def db(database_url_module: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(database_url_module, autocommit=True) as conn:
        yield conn


def delayed(topic: str, seconds: float, **properties: Any) -> Any:
    sent = message(topic, b"later", kind=d.DELAY, **properties)
    sent.system_properties.delivery_timestamp.FromDatetime(
        datetime.now(UTC) + timedelta(seconds=seconds)
    )
    return sent


def subscribe(door: GrpcDoor, topic: str) -> None:
    # The first receive subscribes the group; later commits reach it.
    door.receive(receive_request(GROUP, topic))


def receive(door: GrpcDoor, topic: str, wait: float = 0.0) -> list[Any]:
    return received_messages(door.receive(receive_request(GROUP, topic, wait=wait), timeout=30))


def test_a_delay_message_arrives_at_its_time_with_its_timestamp(door: GrpcDoor) -> None:
    topic = "delay-arrives"
    subscribe(door, topic)
    sent = delayed(topic, 1.5)
    (entry,) = door.send(sent).entries
    assert entry.status.code == OK and entry.recall_handle
    assert receive(door, topic) == []
    (got,) = receive(door, topic, wait=20)
    due = sent.system_properties.delivery_timestamp
    assert got.system_properties.delivery_timestamp == due
    assert got.system_properties.message_type == d.DELAY
    assert time.time() >= due.seconds + due.nanos / 1e9


def test_recall_cancels_a_delay_message_and_refuses_a_delivered_one(
    door: GrpcDoor, db: psycopg.Connection
) -> None:
    topic = "delay-recall"
    subscribe(door, topic)
    (entry,) = door.send(delayed(topic, 30)).entries
    wrong_topic = door.call(
        "RecallMessage",
        s.RecallMessageRequest(topic=resource("delay-other"), recall_handle=entry.recall_handle),
    )
    assert wrong_topic.status.code == code("NOT_FOUND")
    recalled = door.call(
        "RecallMessage",
        s.RecallMessageRequest(topic=resource(topic), recall_handle=entry.recall_handle),
    )
    assert recalled.status.code == OK and recalled.message_id == entry.message_id
    details = db.execute(
        "SELECT h.detail FROM message_history h JOIN messages m ON m.id = h.message_offset "
        "WHERE m.message_id = %s ORDER BY h.id",
        (entry.message_id,),
    ).fetchall()
    assert details[-1] == ("recalled",)
    assert db.execute(
        "SELECT count(*) FROM deliveries WHERE message_offset = %s", (entry.offset,)
    ).fetchone() == (0,)

    (soon,) = door.send(delayed(topic, 0.2)).entries
    assert len(receive(door, topic, wait=10)) == 1
    late = door.call(
        "RecallMessage",
        s.RecallMessageRequest(topic=resource(topic), recall_handle=soon.recall_handle),
    )
    assert late.status.code != OK and "already delivered" in late.status.message
    bad = door.call(
        "RecallMessage", s.RecallMessageRequest(topic=resource(topic), recall_handle="nonsense")
    )
    assert bad.status.code == code("BAD_REQUEST") and "recall handle" in bad.status.message


def test_a_half_message_with_a_delivery_time_is_received_after_commit_and_time(
    door: GrpcDoor,
) -> None:
    topic = "delay-half"
    subscribe(door, topic)
    half = message(topic, b"t", kind=d.TRANSACTION)
    half.system_properties.delivery_timestamp.FromDatetime(
        datetime.now(UTC) + timedelta(seconds=1.5)
    )
    (entry,) = door.send(half).entries
    assert entry.status.code == OK and entry.transaction_id
    assert receive(door, topic) == []
    assert door.call("EndTransaction", end_request(topic, entry, d.COMMIT)).status.code == OK
    assert receive(door, topic) == []  # committed, its time not yet come
    (got,) = receive(door, topic, wait=20)
    assert got.system_properties.message_id == entry.message_id


def test_end_transaction_source_is_in_the_history(door: GrpcDoor, db: psycopg.Connection) -> None:
    topic = "delay-source"
    sources = []
    for from_check in (False, True):
        (entry,) = door.send(message(topic, kind=d.TRANSACTION)).entries
        request = end_request(topic, entry, d.COMMIT, from_check=from_check)
        assert door.call("EndTransaction", request).status.code == OK
        row = db.execute(
            "SELECT h.source FROM message_history h JOIN messages m ON m.id = h.message_offset "
            "WHERE m.message_id = %s AND h.to_state = 'committed'",
            (entry.message_id,),
        ).fetchone()
        sources.append(row[0])
    assert sources == ["client", "check"]


def test_trace_context_goes_from_grpc_to_http_and_back(door: GrpcDoor) -> None:
    topic = "delay-trace"
    http = httpx.Client(base_url=door.server.url, timeout=10)
    with http:
        subscribed = http.put(f"/v1/consumer-groups/{GROUP}/subscriptions/{topic}", json={})
        assert subscribed.status_code in (200, 201), subscribed.text
        assert door.send(message(topic, b"g", trace_context=TRACE)).status.code == OK
        got = http.post(f"/v1/consumer-groups/{GROUP}/receive", json={"topic": topic})
        (received,) = got.json()["messages"]
        assert received["trace_context"] == TRACE
        other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        sent = http.post(
            "/v1/messages", json={"topic": topic, "body_text": "h", "trace_context": other}
        )
        assert sent.status_code == 201, sent.text
        (back,) = receive(door, topic)
        assert back.system_properties.trace_context == other
        refused = http.post(
            "/v1/messages", json={"topic": topic, "body_text": "h", "trace_context": "nope"}
        )
        assert refused.status_code in (400, 422) and "trace" in refused.text
    bad = door.send(message(topic, b"g", trace_context="nope"))
    assert bad.status.code == code("BAD_REQUEST") and "traceparent" in bad.status.message
    assert receive_status(door.receive(receive_request(GROUP, topic))).code == code(
        "MESSAGE_NOT_FOUND"
    )
