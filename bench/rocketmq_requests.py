"""The requests RocketMQ 5 clients send, built with the protocol's generated modules.

For code that drives the gRPC door with the raw stubs instead of an
official client: the tests (tests/grpc_door.py) and the failover load
(bench/failover). Importing this module imports the client package, which
creates ~/logs/rocketmq_python.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from datetime import UTC, datetime
from typing import Any

from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s

OK = d.Code.Value("OK")


def code(name: str) -> int:
    return int(d.Code.Value(name))


def code_name(number: int) -> str:
    """A RocketMQ code's name, or its number for one the protocol does not name."""
    try:
        return str(d.Code.Name(number))
    except ValueError:
        return str(number)


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
    group: str,
    topic: str,
    expression: str = "*",
    *,
    wait: float = 0.0,
    batch: int = 16,
    invisible: float = 30.0,
) -> Any:
    request = s.ReceiveMessageRequest(
        group=resource(group),
        message_queue=d.MessageQueue(topic=resource(topic), id=0),
        filter_expression=d.FilterExpression(type=d.TAG, expression=expression),
        batch_size=batch,
    )
    request.invisible_duration.FromMilliseconds(int(invisible * 1000))
    request.long_polling_timeout.FromMilliseconds(int(wait * 1000))
    return request


def ack_request(group: str, topic: str, *received: Any) -> Any:
    """An ack of received messages, by their message ids and receipt handles."""
    return s.AckMessageRequest(
        group=resource(group),
        topic=resource(topic),
        entries=[
            s.AckMessageEntry(
                message_id=m.system_properties.message_id,
                receipt_handle=m.system_properties.receipt_handle,
            )
            for m in received
        ],
    )


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


def received_messages(responses: list[Any]) -> list[Any]:
    return [r.message for r in responses if r.WhichOneof("content") == "message"]


def receive_status(responses: list[Any]) -> Any:
    return next(r.status for r in responses if r.WhichOneof("content") == "status")
