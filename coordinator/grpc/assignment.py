"""The one queue of a topic, as QueryRoute and QueryAssignment hand it out.

Every node serves every receive (the state is in PostgreSQL), so a topic has
one virtual queue (id 0) on one broker, and its broker endpoints are the ones
the client used to reach this door: the access point it gave is what it can
reach, whichever node (or `serve --workers` process) answers. Every node thus
answers the same queue for the same request, and a PushConsumer's assignment
never changes under it (a change would make the client drop its queue and
its cached messages).

A PushConsumer asks for its assignment every 5 s and runs one receive loop
per assigned queue; several consumers of a group each get the same queue and
receive from it concurrently: the database hands each message to one of them
(SKIP LOCKED), and a FIFO group one message of each message group at a time.
"""

from __future__ import annotations

from typing import Any

from coordinator.core.auth import Authenticator
from coordinator.core.configs import GrpcDoorConfig
from coordinator.grpc.calls import answered, consumer_call
from coordinator.grpc.status import status
from coordinator.grpc.stubs import Stubs

BROKER_NAME = "coordinator"
QUEUE_ID = 0  # the Node client needs id 0


def own_endpoints(stubs: Stubs, config: GrpcDoorConfig, port: int) -> Any:
    """This server's address, for a request that names no endpoints."""
    definition = stubs.definition
    host = config.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    scheme = definition.IPv4
    if ":" in host:
        scheme = definition.IPv6
    elif not host.replace(".", "").isdigit():
        scheme = definition.DOMAIN_NAME
    return definition.Endpoints(scheme=scheme, addresses=[definition.Address(host=host, port=port)])


def topic_queue(stubs: Stubs, topic: str, endpoints: Any) -> Any:
    """The topic's one queue, on the broker reached at `endpoints`."""
    definition = stubs.definition
    return definition.MessageQueue(
        topic=definition.Resource(name=topic),
        id=QUEUE_ID,
        permission=definition.READ_WRITE,
        broker=definition.Broker(name=BROKER_NAME, id=0, endpoints=endpoints),
        accept_message_types=[
            definition.NORMAL,
            definition.FIFO,
            definition.DELAY,
            definition.TRANSACTION,
        ],
    )


def requested_endpoints(stubs: Stubs, config: GrpcDoorConfig, port: int, request: Any) -> Any:
    """The access point the client used (its address scheme included), else our own.

    Echoed rather than guessed: it is what reaches this server from the client.
    """
    if request.HasField("endpoints") and request.endpoints.addresses:
        return request.endpoints
    return own_endpoints(stubs, config, port)


class Assignments:
    """QueryAssignment: a PushConsumer's queues of a topic, the topic's one queue."""

    def __init__(
        self, authenticator: Authenticator, config: GrpcDoorConfig, stubs: Stubs, *, port: int
    ) -> None:
        self.authenticator = authenticator
        self.config = config
        self.stubs = stubs
        self.port = port

    @answered("QueryAssignmentResponse")
    async def QueryAssignment(self, request: Any, context: Any) -> Any:
        _, _, topic = consumer_call(context, self.authenticator, request.group, request.topic)
        endpoints = requested_endpoints(self.stubs, self.config, self.port, request)
        assignment = self.stubs.definition.Assignment(
            message_queue=topic_queue(self.stubs, topic, endpoints)
        )
        return self.stubs.service.QueryAssignmentResponse(
            status=status(self.stubs), assignments=[assignment]
        )
