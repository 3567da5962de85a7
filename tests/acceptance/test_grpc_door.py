"""The RocketMQ gRPC door with the raw protocol stubs: every RPC, its status codes, its checks.

The official clients are driven in test_rocketmq_python.py and
test_rocketmq_nodejs.py; here each RPC is called the way they call it, and
the way they never would (bad input, wrong credentials), and the database
says what was stored.
"""

from __future__ import annotations

import hashlib
import queue
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import psycopg
import pytest
import trustme
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol import service_pb2_grpc

from bench.server import free_port, serve_process
from coordinator.config import Settings
from tests.checkback_helpers import check_settings
from tests.grpc_door import (
    OK,
    GrpcDoor,
    ack_request,
    code,
    consumer_settings,
    end_request,
    grpc_door,
    message,
    message_state,
    metadata,
    producer_settings,
    receive_request,
    receive_status,
    received_messages,
    resource,
)
from tests.own_postgres import own_postgres

TOPIC = "orders"
GROUP = "billing"


@pytest.fixture
def door(database_url: str) -> Iterator[GrpcDoor]:
    settings = check_settings(
        check_scheduler_enabled=True,
        check_scan_interval_seconds=0.1,
        transaction_timeout_seconds=0.5,
        check_interval_seconds=1.0,
    )
    with grpc_door(database_url, settings) as door:
        yield door


def _count(db: psycopg.Connection, table: str = "messages") -> int:
    row = db.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])


def test_query_route_lists_queue_0_on_the_address_the_client_used(door: GrpcDoor) -> None:
    endpoints = d.Endpoints(scheme=d.IPv4, addresses=[d.Address(host="127.0.0.1", port=door.port)])
    answer = door.call(
        "QueryRoute", s.QueryRouteRequest(topic=resource(TOPIC), endpoints=endpoints)
    )
    assert answer.status.code == OK
    (queue_,) = answer.message_queues
    assert queue_.id == 0
    assert queue_.permission == d.READ_WRITE
    assert queue_.broker.id == 0
    assert queue_.broker.endpoints == endpoints
    assert set(queue_.accept_message_types) == {d.NORMAL, d.FIFO, d.DELAY, d.TRANSACTION}

    bad = door.call("QueryRoute", s.QueryRouteRequest(topic=resource("no spaces allowed")))
    assert bad.status.code == code("ILLEGAL_TOPIC")
    assert "topic" in bad.status.message


def test_a_normal_message_is_stored_committed_and_a_resend_is_answered_ok_once(
    door: GrpcDoor, db: psycopg.Connection
) -> None:
    sent = message(TOPIC, b"n1", tag="TagA", keys=["k1"])
    first = door.send(sent)
    assert first.status.code == OK
    (entry,) = first.entries
    assert entry.message_id == sent.system_properties.message_id
    assert entry.offset > 0
    assert entry.transaction_id == ""
    again = door.send(sent)  # the client's retry after a lost answer
    assert again.status.code == OK
    assert again.entries[0].offset == entry.offset
    assert message_state(db, entry.message_id) == ("committed", "client")
    row = db.execute(
        "SELECT producer_group, tags, keys FROM messages WHERE message_id = %s",
        (entry.message_id,),
    ).fetchone()
    assert row == (None, "TagA", ["k1"])
    assert _count(db) == 1


def test_a_transaction_commits_and_rolls_back_with_faithful_status_codes(
    door: GrpcDoor, db: psycopg.Connection
) -> None:
    half = door.send(message(TOPIC, b"t1", kind=d.TRANSACTION)).entries[0]
    assert half.status.code == OK and half.transaction_id
    assert message_state(db, half.message_id) == ("prepared", None)
    # the producer group is the topic
    row = db.execute(
        "SELECT producer_group FROM messages WHERE message_id = %s", (half.message_id,)
    ).fetchone()
    assert row == (TOPIC,)

    # resolution 0: what the Python client sends for UNSPECIFIED means unknown
    unknown = door.call("EndTransaction", end_request(TOPIC, half, 0))
    assert unknown.status.code == OK
    assert message_state(db, half.message_id) == ("prepared", None)

    committed = door.call("EndTransaction", end_request(TOPIC, half, d.COMMIT))
    assert committed.status.code == OK
    assert message_state(db, half.message_id) == ("committed", "client")
    repeat = door.call("EndTransaction", end_request(TOPIC, half, d.COMMIT))
    assert repeat.status.code == OK  # an idempotent repeat
    conflict = door.call("EndTransaction", end_request(TOPIC, half, d.ROLLBACK))
    assert conflict.status.code == code("PRECONDITION_FAILED")
    assert "committed" in conflict.status.message
    assert message_state(db, half.message_id) == ("committed", "client")

    other = door.send(message(TOPIC, b"t2", kind=d.TRANSACTION)).entries[0]
    rolled = door.call("EndTransaction", end_request(TOPIC, other, d.ROLLBACK, from_check=True))
    assert rolled.status.code == OK
    assert message_state(db, other.message_id) == ("rolled_back", "check")

    missing = s.EndTransactionRequest(
        topic=resource(TOPIC), transaction_id="no-such-transaction", resolution=d.COMMIT
    )
    answer = door.call("EndTransaction", missing)
    assert answer.status.code == code("NOT_FOUND")
    assert answer.status.message
    no_id = door.call("EndTransaction", s.EndTransactionRequest(topic=resource(TOPIC)))
    assert no_id.status.code == code("INVALID_TRANSACTION_ID")


def test_the_recovery_duration_becomes_check_immunity_capped_at_an_hour(
    door: GrpcDoor, db: psycopg.Connection
) -> None:
    short = message(TOPIC, kind=d.TRANSACTION)
    short.system_properties.orphaned_transaction_recovery_duration.FromSeconds(90)
    long = message(TOPIC, kind=d.TRANSACTION)
    long.system_properties.orphaned_transaction_recovery_duration.FromSeconds(7200)
    for sent in (short, long):
        assert door.send(sent).status.code == OK
    rows = dict(
        db.execute("SELECT message_id, extract(epoch FROM check_immunity) FROM messages").fetchall()
    )
    assert rows[short.system_properties.message_id] == 90
    assert rows[long.system_properties.message_id] == 3600


def test_the_check_immunity_user_property_is_honoured_below_the_recovery_duration(
    door: GrpcDoor, db: psycopg.Connection
) -> None:
    by_property = message(TOPIC, kind=d.TRANSACTION)
    by_property.user_properties["CHECK_IMMUNITY_TIME_IN_SECONDS"] = "120"
    both = message(TOPIC, kind=d.TRANSACTION)
    both.user_properties["CHECK_IMMUNITY_TIME_IN_SECONDS"] = "120"
    both.system_properties.orphaned_transaction_recovery_duration.FromSeconds(90)
    for sent in (by_property, both):
        assert door.send(sent).status.code == OK
    rows = dict(
        db.execute("SELECT message_id, extract(epoch FROM check_immunity) FROM messages").fetchall()
    )
    assert rows[by_property.system_properties.message_id] == 120
    assert rows[both.system_properties.message_id] == 90  # as the proxy: the duration wins
    bad = message(TOPIC, kind=d.TRANSACTION)
    bad.user_properties["CHECK_IMMUNITY_TIME_IN_SECONDS"] = "soon"
    answer = door.send(bad)
    assert answer.status.code == code("BAD_REQUEST")
    assert "CHECK_IMMUNITY_TIME_IN_SECONDS" in answer.status.message
    assert _count(db) == 2


@pytest.mark.parametrize(
    ("build", "expected", "words"),
    [
        (lambda: message(TOPIC, kind=d.FIFO), "ILLEGAL_MESSAGE_GROUP", "message group"),
        (lambda: message(TOPIC, kind=d.DELAY), "BAD_REQUEST", "delivery_timestamp"),
        (lambda: message(TOPIC, kind=d.MESSAGE_TYPE_UNSPECIFIED), "UNSUPPORTED", "type"),
        (lambda: message(TOPIC, kind=d.PRIORITY), "UNSUPPORTED", "type PRIORITY"),
        (lambda: message(TOPIC, lite_topic="sub"), "UNSUPPORTED", "lite topics"),
        (lambda: message(TOPIC, priority=3), "UNSUPPORTED", "priority"),
        (lambda: message("bad topic!"), "ILLEGAL_TOPIC", "topic"),
        (lambda: message(TOPIC, message_id="spaces are not ids"), "BAD_REQUEST", "message id"),
        (lambda: message(TOPIC, tag="a||b"), "BAD_REQUEST", "tag"),
        (lambda: message(TOPIC, b"x" * 2048), "BAD_REQUEST", "body"),
    ],
)
def test_bad_messages_get_a_code_and_a_sentence_and_store_nothing(
    database_url: str, db: psycopg.Connection, build: Any, expected: str, words: str
) -> None:
    with grpc_door(database_url, Settings(database_url=None, max_body_bytes=1024)) as door:
        answer = door.send(build())
    assert answer.status.code == code(expected), answer.status
    assert words.lower() in answer.status.message.lower()
    assert answer.entries[0].status.code == code(expected)
    assert _count(db) == 0


def test_a_receive_subscribes_filters_by_tag_and_acks(
    door: GrpcDoor, db: psycopg.Connection
) -> None:
    # the first receive makes the subscription; only later commits reach it
    assert receive_status(door.receive(receive_request(GROUP, TOPIC, "TagA"))).code == code(
        "MESSAGE_NOT_FOUND"
    )
    door.send(message(TOPIC, b"wanted", tag="TagA"))
    door.send(message(TOPIC, b"filtered out", tag="TagB"))
    responses = door.receive(receive_request(GROUP, TOPIC, "TagA", wait=3))
    assert receive_status(responses).code == OK
    (got,) = received_messages(responses)
    assert got.body == b"wanted"
    system = got.system_properties
    assert system.body_encoding == d.IDENTITY
    assert system.body_digest.type == d.MD5
    assert system.body_digest.checksum == hashlib.md5(b"wanted").hexdigest().upper()
    assert system.delivery_attempt == 1
    assert system.receipt_handle
    assert system.tag == "TagA"

    ack = ack_request(GROUP, TOPIC, got)
    assert door.call("AckMessage", ack).status.code == OK
    again = door.call("AckMessage", ack)
    assert again.status.code == code("NOT_FOUND")
    assert _count(db, "deliveries") == 0


def test_a_receive_subscribes_again_a_group_the_retention_job_removed(
    door: GrpcDoor, db: psycopg.Connection
) -> None:
    assert receive_status(door.receive(receive_request(GROUP, TOPIC))).code == code(
        "MESSAGE_NOT_FOUND"
    )
    # What remove_idle_consumer_groups does to an idle group.
    db.execute("DELETE FROM subscriptions WHERE consumer_group = %s", (GROUP,))
    assert receive_status(door.receive(receive_request(GROUP, TOPIC))).code == code(
        "MESSAGE_NOT_FOUND"
    )
    assert _count(db, "subscriptions") == 1
    door.send(message(TOPIC, b"after the comeback"))
    responses = door.receive(receive_request(GROUP, TOPIC, wait=3))
    assert [got.body for got in received_messages(responses)] == [b"after the comeback"]


def test_messages_cross_between_the_http_and_grpc_doors(door: GrpcDoor) -> None:
    http = httpx.Client(base_url=door.server.url, timeout=30)
    with http:
        assert http.put(
            f"/v1/consumer-groups/http-group/subscriptions/{TOPIC}", json={"expression": "*"}
        ).status_code in (200, 201)
        door.receive(receive_request(GROUP, TOPIC))  # subscribes the gRPC group
        door.send(message(TOPIC, b"from grpc"))
        sent = http.post("/v1/messages", json={"topic": TOPIC, "body_text": "from http"})
        assert sent.status_code == 201, sent.text

        bodies = []
        deadline = time.monotonic() + 10
        while len(bodies) < 2 and time.monotonic() < deadline:
            bodies += [
                m.body
                for m in received_messages(door.receive(receive_request(GROUP, TOPIC, wait=2)))
            ]
        assert sorted(bodies) == [b"from grpc", b"from http"]

        over_http = http.post(
            "/v1/consumer-groups/http-group/receive", json={"max_messages": 10, "wait_seconds": 2}
        )
        assert over_http.status_code == 200, over_http.text
        texts = sorted(m["body_text"] for m in over_http.json()["messages"])
        assert texts == ["from grpc", "from http"]


def test_change_invisible_duration_redelivers_with_a_higher_attempt_and_dead_letters(
    door: GrpcDoor, db: psycopg.Connection
) -> None:
    door.receive(receive_request(GROUP, TOPIC))
    door.send(message(TOPIC, b"again"))
    (first,) = received_messages(door.receive(receive_request(GROUP, TOPIC, wait=3)))
    change = s.ChangeInvisibleDurationRequest(
        group=resource(GROUP),
        topic=resource(TOPIC),
        receipt_handle=first.system_properties.receipt_handle,
        message_id=first.system_properties.message_id,
    )
    change.invisible_duration.FromMilliseconds(200)
    changed = door.call("ChangeInvisibleDuration", change)
    assert changed.status.code == OK
    assert changed.receipt_handle != first.system_properties.receipt_handle
    stale = door.call("ChangeInvisibleDuration", change)
    assert stale.status.code == code("INVALID_RECEIPT_HANDLE")
    assert stale.receipt_handle  # the Python client reads it before the status

    time.sleep(0.3)
    (second,) = received_messages(door.receive(receive_request(GROUP, TOPIC, wait=3)))
    assert second.system_properties.delivery_attempt == 2

    forward = s.ForwardMessageToDeadLetterQueueRequest(
        group=resource(GROUP),
        topic=resource(TOPIC),
        receipt_handle=second.system_properties.receipt_handle,
        message_id=second.system_properties.message_id,
        delivery_attempt=2,
        max_delivery_attempts=2,
    )
    assert door.call("ForwardMessageToDeadLetterQueue", forward).status.code == OK
    assert _count(db, "dead_letters") == 1
    assert _count(db, "deliveries") == 0
    gone = door.call("ForwardMessageToDeadLetterQueue", forward)
    assert gone.status.code == code("NOT_FOUND")


class _Stream:
    """A Telemetry stream: commands written by the test, replies read on a thread."""

    def __init__(self, door: GrpcDoor, client_id: str) -> None:
        self._outgoing: queue.Queue[Any] = queue.Queue()
        self.replies: queue.Queue[Any] = queue.Queue()
        self.call = door.stub.Telemetry(
            iter(self._outgoing.get, None), metadata=metadata(door.token, client_id)
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for reply in self.call:
                self.replies.put(reply)
        except grpc.RpcError:
            pass

    def write(self, command: Any) -> None:
        self._outgoing.put(command)

    def next(self, timeout: float = 10) -> Any:
        return self.replies.get(timeout=timeout)

    def close(self) -> None:
        self._outgoing.put(None)
        self._reader.join(timeout=10)


def test_check_backs_go_to_the_producer_stream_that_announced_the_topic(
    door: GrpcDoor, db: psycopg.Connection
) -> None:
    consumer = _Stream(door, "consumer@1")
    consumer.write(consumer_settings(GROUP, TOPIC))
    assert consumer.next().status.code == OK
    producer = _Stream(door, "producer@1")
    producer.write(producer_settings(TOPIC))
    reply = producer.next()
    assert reply.status.code == OK
    assert reply.settings.publishing.max_body_size > 0
    assert reply.settings.backoff_policy.WhichOneof("strategy") == "exponential_backoff"
    try:
        rows = db.execute("SELECT producer_group, instance_id FROM producers").fetchall()
        assert rows == [(TOPIC, "producer@1")]

        half = door.send(message(TOPIC, b"orphan", kind=d.TRANSACTION)).entries[0]
        command = producer.next(timeout=15)
        recover = command.recover_orphaned_transaction_command
        assert recover.transaction_id == half.transaction_id
        assert recover.message.system_properties.message_id == half.message_id
        assert recover.message.body == b"orphan"
        assert recover.message.system_properties.body_encoding == d.IDENTITY
        answer = door.call("EndTransaction", end_request(TOPIC, half, d.COMMIT, from_check=True))
        assert answer.status.code == OK
        assert message_state(db, half.message_id) == ("committed", "check")
        assert consumer.replies.empty()  # never a check-back on a consumer's stream
    finally:
        producer.close()
        consumer.close()
    deadline = time.monotonic() + 10
    while _count(db, "producers") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _count(db, "producers") == 0  # the instance left with its stream


def test_check_backs_wait_for_a_producer_stream_without_using_their_budget(
    door: GrpcDoor, db: psycopg.Connection
) -> None:
    half = door.send(message(TOPIC, kind=d.TRANSACTION)).entries[0]
    time.sleep(2.5)  # several rounds pass with no producer of the topic
    row = db.execute(
        "SELECT state, check_count FROM messages WHERE message_id = %s", (half.message_id,)
    ).fetchone()
    assert row == ("prepared", 0)
    producer = _Stream(door, "late-producer@1")
    try:
        producer.write(producer_settings(TOPIC))
        assert producer.next().status.code == OK
        command = producer.next(timeout=15)
        assert command.recover_orphaned_transaction_command.transaction_id == half.transaction_id
    finally:
        producer.close()


def test_query_assignment_hands_a_push_consumer_the_routes_one_queue(door: GrpcDoor) -> None:
    endpoints = d.Endpoints(scheme=d.IPv4, addresses=[d.Address(host="127.0.0.1", port=door.port)])
    route = door.call("QueryRoute", s.QueryRouteRequest(topic=resource(TOPIC), endpoints=endpoints))
    request = s.QueryAssignmentRequest(
        topic=resource(TOPIC), group=resource(GROUP), endpoints=endpoints
    )
    answer = door.call("QueryAssignment", request)
    assert answer.status.code == OK
    (assignment,) = answer.assignments
    assert assignment.message_queue == route.message_queues[0]
    # Asked again (every 5 s by the clients): the same queue, so none is dropped.
    assert door.call("QueryAssignment", request).assignments == answer.assignments

    no_group = door.call("QueryAssignment", s.QueryAssignmentRequest(topic=resource(TOPIC)))
    assert no_group.status.code == code("ILLEGAL_CONSUMER_GROUP")
    spaced = s.QueryAssignmentRequest(topic=resource("no spaces"), group=resource(GROUP))
    assert door.call("QueryAssignment", spaced).status.code == code("ILLEGAL_TOPIC")
    namespaced = s.QueryAssignmentRequest(
        topic=resource(TOPIC), group=d.Resource(name=GROUP, resource_namespace="tenant")
    )
    refused = door.call("QueryAssignment", namespaced)
    assert refused.status.code == code("UNSUPPORTED")
    assert "namespaces are not supported" in refused.status.message


def test_a_push_consumers_settings_carry_its_groups_fifo_flag_and_retry_policy(
    door: GrpcDoor,
) -> None:
    with httpx.Client(base_url=door.server.url, timeout=30) as http:
        made = http.put(
            f"/v1/consumer-groups/fifo-group/subscriptions/{TOPIC}",
            json={"expression": "*", "fifo": True, "max_delivery_attempts": 4},
        )
        assert made.status_code == 201, made.text
    python = _Stream(door, "push@python")
    node = _Stream(door, "push@node")
    try:
        python.write(consumer_settings("fifo-group", TOPIC, client_type=d.PUSH_CONSUMER))
        reply = python.next()
        assert reply.status.code == OK
        answer = reply.settings
        assert answer.subscription.fifo is True
        assert answer.subscription.receive_batch_size == 32
        assert answer.subscription.long_polling_timeout.seconds == 30
        assert answer.backoff_policy.max_attempts == 4
        delays = [step.seconds for step in answer.backoff_policy.customized_backoff.next]
        assert delays[:6] == [1, 5, 10, 30, 60, 120]

        node.write(consumer_settings(GROUP, TOPIC, client_type=d.PUSH_CONSUMER, language=d.NODE_JS))
        answer = node.next().settings
        assert answer.subscription.fifo is False
        assert answer.backoff_policy.max_attempts == 16
        assert answer.backoff_policy.exponential_backoff.initial.seconds == 5
    finally:
        python.close()
        node.close()


def test_a_push_consumers_nack_waits_for_the_groups_backoff(door: GrpcDoor) -> None:
    stream = _Stream(door, "push@nack")
    try:
        stream.write(consumer_settings(GROUP, TOPIC, client_type=d.PUSH_CONSUMER))
        assert stream.next().status.code == OK
        sent = door.send(message(TOPIC, b"nacked")).entries[0]
        (got,) = received_messages(door.receive(receive_request(GROUP, TOPIC, wait=5)))
        assert got.system_properties.delivery_attempt == 1
        # The Node client asks for 0 s; the group's backoff for attempt 1 is 1 s.
        nack = s.ChangeInvisibleDurationRequest(
            group=resource(GROUP),
            topic=resource(TOPIC),
            receipt_handle=got.system_properties.receipt_handle,
            message_id=sent.message_id,
        )
        nack.invisible_duration.FromSeconds(0)
        nacked = door.call(
            "ChangeInvisibleDuration", nack, metadata=metadata(door.token, "push@nack")
        )
        assert nacked.status.code == OK, nacked.status.message
        assert received_messages(door.receive(receive_request(GROUP, TOPIC, wait=0))) == []
        (again,) = received_messages(door.receive(receive_request(GROUP, TOPIC, wait=10)))
        assert again.system_properties.delivery_attempt == 2
    finally:
        stream.close()


def test_unsupported_rpcs_answer_a_sentence(door: GrpcDoor) -> None:
    for rpc, request in [
        ("UpdateOffset", s.UpdateOffsetRequest()),
        ("GetOffset", s.GetOffsetRequest()),
        ("QueryOffset", s.QueryOffsetRequest()),
        ("SyncLiteSubscription", s.SyncLiteSubscriptionRequest()),
    ]:
        answer = door.call(rpc, request)
        assert answer.status.code == code("UNSUPPORTED"), rpc
        assert "not supported" in answer.status.message
    (pulled,) = list(door.stub.PullMessage(s.PullMessageRequest(), metadata=metadata(), timeout=5))
    assert pulled.status.code == code("UNSUPPORTED")


def test_the_door_checks_tokens_permissions_and_limits_like_http(
    database_url: str, db: psycopg.Connection, issue_token: Any
) -> None:
    producer = issue_token("orders-producer", produce_topics=(TOPIC,), producer_groups=(TOPIC,))
    admin = issue_token("admin", admin=True)
    settings = Settings(database_url=None, max_long_polls_per_token=1)
    with grpc_door(database_url, settings, token=producer) as door:
        anonymous = door.call(
            "SendMessage", s.SendMessageRequest(messages=[message(TOPIC)]), metadata=metadata()
        )
        assert anonymous.status.code == code("UNAUTHORIZED")
        assert "token" in anonymous.status.message

        forged = metadata(producer)
        forged[-1] = ("authorization", forged[-1][1].rsplit("=", 1)[0] + "=00")
        wrong = door.call(
            "SendMessage", s.SendMessageRequest(messages=[message(TOPIC)]), metadata=forged
        )
        assert wrong.status.code == code("UNAUTHORIZED")
        assert "secret key" in wrong.status.message

        elsewhere = door.send(message("payments"))
        assert elsewhere.status.code == code("FORBIDDEN")
        assert "payments" in elsewhere.status.message
        assert _count(db) == 0

        half = door.send(message(TOPIC, kind=d.TRANSACTION)).entries[0]
        assert half.status.code == OK
        assert door.call("EndTransaction", end_request(TOPIC, half, d.COMMIT)).status.code == OK

        no_consume = door.receive(receive_request(GROUP, TOPIC))
        assert receive_status(no_consume).code == code("FORBIDDEN")

        # a long poll of the admin token is one of its max_long_polls_per_token
        admin_door = GrpcDoor(door.server, door.port, admin)
        waiting = threading.Thread(
            target=admin_door.receive, args=(receive_request(GROUP, TOPIC, wait=3),)
        )
        admin_door.receive(receive_request(GROUP, TOPIC))  # subscribe first
        waiting.start()
        time.sleep(1)
        second = admin_door.receive(receive_request(GROUP, TOPIC, wait=1))
        waiting.join(timeout=10)
        admin_door.channel.close()
        assert receive_status(second).code == code("TOO_MANY_REQUESTS")


@pytest.mark.slow
def test_serve_grpc_port_serves_the_door_with_tls_when_https_is_on(
    tmp_path: Path, database_url: str
) -> None:
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    issued.private_key_pem.write_to_path(str(key))
    issued.cert_chain_pems[0].write_to_path(str(cert))
    trusted = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ca.configure_trust(trusted)
    grpc_port = free_port()
    with serve_process(
        cwd=tmp_path,
        global_args=["--database-url", database_url],
        serve_args=["--grpc-port", str(grpc_port), "--tls-cert", str(cert), "--tls-key", str(key)],
        tls=trusted,
    ) as server:
        credentials = grpc.ssl_channel_credentials(root_certificates=ca.cert_pem.bytes())
        with grpc.secure_channel(f"127.0.0.1:{grpc_port}", credentials) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            answer = stub.QueryRoute(
                s.QueryRouteRequest(topic=resource(TOPIC)), metadata=metadata(), timeout=10
            )
            assert answer.status.code == OK
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as plain:
            stub = service_pb2_grpc.MessagingServiceStub(plain)
            with pytest.raises(grpc.RpcError):
                stub.QueryRoute(s.QueryRouteRequest(topic=resource(TOPIC)), timeout=3)
        server.process.terminate()
        output = server.process.communicate(timeout=30)[0].decode()
    assert f"RocketMQ gRPC door on 127.0.0.1:{grpc_port} (TLS)" in output


@pytest.mark.slow
def test_postgres_away_gets_ha_not_available_with_a_sentence_then_recovers(
    tmp_path: Path,
) -> None:
    with own_postgres("coordinator-test-grpc-outage-") as postgres:
        url = postgres.migrated_database("outage")
        settings = Settings(database_url=None, pool_timeout_seconds=1.0)
        with grpc_door(url, settings) as door:
            stored = door.send(message(TOPIC, b"before", kind=d.TRANSACTION)).entries[0]
            assert stored.status.code == OK
            postgres.stop("fast")
            try:
                started = time.monotonic()
                away = door.send(message(TOPIC, b"during"))
                assert away.status.code == code("HA_NOT_AVAILABLE")
                assert "PostgreSQL" in away.status.message
                ended = door.call("EndTransaction", end_request(TOPIC, stored, d.COMMIT))
                assert ended.status.code == code("HA_NOT_AVAILABLE")
                assert time.monotonic() - started < 20
            finally:
                postgres.start()
            deadline = time.monotonic() + 20
            while True:
                answer = door.call("EndTransaction", end_request(TOPIC, stored, d.COMMIT))
                if answer.status.code == OK or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert answer.status.code == OK
        with psycopg.connect(url) as conn:
            rows = conn.execute("SELECT body, state FROM messages").fetchall()
    assert rows == [(b"before", "committed")]  # nothing half-stored while it was away
