"""Driving the RocketMQ gRPC door with the raw protocol stubs, as a client would.

`GrpcDoor` is a coordinator with the door on (a LiveServer with grpc_port),
a channel to it, and builders for the requests the official clients send.
The official clients themselves are driven in test_rocketmq_python.py and
test_rocketmq_nodejs.py; these stubs reach what the clients never send.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import grpc
import psycopg
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol import service_pb2_grpc

from bench.server import free_port
from coordinator.config import Settings
from tests.conftest import LiveServer

OK = d.Code.Value("OK")
_ids = itertools.count(1)


def code(name: str) -> int:
    return int(d.Code.Value(name))


def metadata(token: str | None = None, client_id: str = "test-client@1") -> list[tuple[str, str]]:
    """The headers the Python client sends (its `authorization` always, as it does)."""
    now = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    secret = token or ""
    signature = hmac.new(secret.encode(), now.encode(), hashlib.sha1).hexdigest()
    return [
        ("x-mq-client-id", client_id),
        ("x-mq-language", "PYTHON"),
        ("x-mq-date-time", now),
        ("x-mq-namespace", ""),
        (
            "authorization",
            f"MQv2-HMAC-SHA1 Credential={secret}, SignedHeaders=x-mq-date-time, "
            f"Signature={signature}",
        ),
    ]


def resource(name: str) -> Any:
    return d.Resource(name=name)


def message(
    topic: str,
    body: bytes = b"hello",
    *,
    kind: int = d.NORMAL,
    tag: str | None = None,
    message_id: str | None = None,
    **properties: Any,
) -> Any:
    system = d.SystemProperties(
        message_id=message_id or f"MSG{uuid.uuid4().hex.upper()}",
        message_type=kind,
        body_encoding=d.IDENTITY,
        **properties,
    )
    if tag is not None:
        system.tag = tag
    return d.Message(topic=resource(topic), system_properties=system, body=body)


def send_request(*messages: Any) -> Any:
    return s.SendMessageRequest(messages=list(messages))


def end_request(topic: str, entry: Any, resolution: int, *, from_check: bool = False) -> Any:
    return s.EndTransactionRequest(
        topic=resource(topic),
        message_id=entry.message_id,
        transaction_id=entry.transaction_id,
        resolution=resolution,
        source=d.SOURCE_SERVER_CHECK if from_check else d.SOURCE_CLIENT,
    )


def receive_request(
    group: str, topic: str, expression: str = "*", *, wait: float = 0.0, batch: int = 16
) -> Any:
    request = s.ReceiveMessageRequest(
        group=resource(group),
        message_queue=d.MessageQueue(topic=resource(topic), id=0),
        filter_expression=d.FilterExpression(type=d.TAG, expression=expression),
        batch_size=batch,
    )
    request.invisible_duration.FromSeconds(30)
    request.long_polling_timeout.FromMilliseconds(int(wait * 1000))
    return request


def producer_settings(*topics: str) -> Any:
    return s.TelemetryCommand(
        settings=d.Settings(
            client_type=d.PRODUCER, publishing=d.Publishing(topics=[resource(t) for t in topics])
        )
    )


def consumer_settings(
    group: str,
    topic: str,
    expression: str = "*",
    *,
    client_type: int = d.SIMPLE_CONSUMER,
    language: int = d.PYTHON,
) -> Any:
    return s.TelemetryCommand(
        settings=d.Settings(
            client_type=client_type,
            user_agent=d.UA(language=language),
            subscription=d.Subscription(
                group=resource(group),
                subscriptions=[
                    d.SubscriptionEntry(
                        topic=resource(topic),
                        expression=d.FilterExpression(type=d.TAG, expression=expression),
                    )
                ],
            ),
        )
    )


class GrpcDoor:
    """A stub on a live coordinator's gRPC door; calls carry `token` unless told otherwise."""

    def __init__(self, server: LiveServer, port: int, token: str | None = None) -> None:
        self.server = server
        self.port = port
        self.endpoint = f"127.0.0.1:{port}"
        self.channel = grpc.insecure_channel(self.endpoint)
        self.stub = service_pb2_grpc.MessagingServiceStub(self.channel)
        self.token = token

    def call(self, rpc: str, request: Any, **options: Any) -> Any:
        options.setdefault("metadata", metadata(self.token))
        options.setdefault("timeout", 10)
        return getattr(self.stub, rpc)(request, **options)

    def receive(self, request: Any, **options: Any) -> list[Any]:
        options.setdefault("metadata", metadata(self.token))
        options.setdefault("timeout", 10)
        return list(self.stub.ReceiveMessage(request, **options))

    def send(self, *messages: Any) -> Any:
        return self.call("SendMessage", send_request(*messages))


def received_messages(responses: list[Any]) -> list[Any]:
    return [r.message for r in responses if r.WhichOneof("content") == "message"]


def receive_status(responses: list[Any]) -> Any:
    return next(r.status for r in responses if r.WhichOneof("content") == "status")


@contextmanager
def grpc_door(
    database_url: str, settings: Settings | None = None, token: str | None = None
) -> Iterator[GrpcDoor]:
    port = free_port()
    settings = (settings or Settings(database_url=None)).with_overrides(grpc_port=port)
    with LiveServer(database_url, settings) as server:
        door = GrpcDoor(server, port, token)
        try:
            yield door
        finally:
            door.channel.close()


def message_state(db: psycopg.Connection, message_id: str) -> tuple[str, str | None]:
    """A message's state and resolution source, by its message id."""
    row = db.execute(
        "SELECT state, resolution_source FROM messages WHERE message_id = %s", (message_id,)
    ).fetchone()
    assert row is not None, f"message {message_id} is not stored"
    return row[0], row[1]
