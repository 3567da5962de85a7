"""Driving the RocketMQ gRPC door with the raw protocol stubs, as a client would.

`GrpcDoor` is a coordinator with the door on (a LiveServer with grpc_port)
and a channel to it; the builders for the requests the official clients
send come from bench/rocketmq_requests.py.
The official clients themselves are driven in test_rocketmq_python.py and
test_rocketmq_nodejs.py; these stubs reach what the clients never send.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import psycopg
from rocketmq.grpc_protocol import service_pb2_grpc

from bench.rocketmq_requests import (
    OK,
    ack_request,
    code,
    consumer_settings,
    end_request,
    message,
    metadata,
    producer_settings,
    receive_request,
    receive_status,
    received_messages,
    resource,
    send_request,
)
from bench.server import free_port
from coordinator.config import Settings
from tests.conftest import LiveServer

__all__ = [
    "OK",
    "GrpcDoor",
    "ack_request",
    "code",
    "consumer_settings",
    "end_request",
    "grpc_door",
    "message",
    "message_state",
    "metadata",
    "producer_settings",
    "receive_request",
    "receive_status",
    "received_messages",
    "resource",
    "send_request",
]


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
