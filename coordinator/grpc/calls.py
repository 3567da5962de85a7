"""What every RPC of the door shares: who calls, the names it gives, and how it is answered.

Every RPC goes through the same authentication, permissions and limits as
HTTP: the token comes in the `authorization` header (`credentials.py`), and
each call counts against the token's rate. A refusal is a RocketMQ status in
the response (`status.py`) with a sentence; an unexpected failure is logged
and answered INTERNAL_ERROR.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from coordinator.core import Coordinator
from coordinator.core.auth import Authenticator
from coordinator.core.configs import GrpcDoorConfig
from coordinator.domain.access import Principal
from coordinator.domain.errors import CoordinatorError, InvalidMessage
from coordinator.domain.rules import check_consumer_group, check_topic
from coordinator.grpc import credentials
from coordinator.grpc.status import DoorError, Unreadable, error_status, status
from coordinator.grpc.stubs import Stubs

log = logging.getLogger(__name__)

INTERNAL = "the coordinator failed on this request (see its log); retry it"

Handler = TypeVar("Handler", bound=Callable[..., Awaitable[Any]])


class DoorPart:
    """What each part of the door works with: the core, the authenticator (HTTP's),
    the door's config and the protocol's modules."""

    def __init__(
        self, core: Coordinator, authenticator: Authenticator, config: GrpcDoorConfig, stubs: Stubs
    ) -> None:
        self.core = core
        self.authenticator = authenticator
        self.config = config
        self.stubs = stubs


@dataclass(frozen=True, slots=True)
class Caller:
    """Who makes a gRPC request: the token's principal and the client's id header."""

    principal: Principal
    client_id: str | None


def caller_of(context: Any, authenticator: Authenticator) -> Caller:
    """The caller of a request, from its metadata; raises when its token is refused."""
    metadata = dict(context.invocation_metadata() or ())
    token = credentials.token_of(metadata.get("authorization"), metadata.get("x-mq-date-time"))
    principal = authenticator.authenticate_token(token, how_to_send=credentials.HOW_TO_SEND)
    namespace = metadata.get("x-mq-namespace", "")
    if namespace:
        raise DoorError("UNSUPPORTED", f"namespaces are not supported (got {namespace!r})")
    return Caller(principal, metadata.get("x-mq-client-id") or None)


def consumer_call(
    context: Any, authenticator: Authenticator, group: Any, topic: Any
) -> tuple[Caller, str, str]:
    """The caller of a consumer's RPC, with the consumer group and the topic its
    `Resource`s name, once the caller's token may consume them."""
    caller = caller_of(context, authenticator)
    consumer_group = group_of(group)
    topic_name = topic_of(topic)
    caller.principal.require_consume(consumer_group, topic_name)
    return caller, consumer_group, topic_name


def topic_of(resource: Any) -> str:
    """The topic a `Resource` names, checked like a topic sent over HTTP."""
    if resource.resource_namespace:
        raise DoorError(
            "UNSUPPORTED",
            f"namespaces are not supported (got {resource.resource_namespace!r})",
        )
    try:
        return check_topic(resource.name)
    except InvalidMessage as error:
        raise DoorError("ILLEGAL_TOPIC", error.message) from None


def group_of(resource: Any) -> str:
    """The consumer group a `Resource` names, checked like one given over HTTP."""
    if resource.resource_namespace:
        raise DoorError(
            "UNSUPPORTED",
            f"namespaces are not supported (got {resource.resource_namespace!r})",
        )
    try:
        return check_consumer_group(resource.name)
    except InvalidMessage as error:
        raise DoorError("ILLEGAL_CONSUMER_GROUP", error.message) from None


class _Answering(Protocol):
    stubs: Stubs


def answered(response: str) -> Callable[[Handler], Handler]:
    """A unary RPC whose refusals and failures become `response` with a status."""

    def wrap(method: Handler) -> Handler:
        @functools.wraps(method)
        async def handler(self: _Answering, request: Any, context: Any) -> Any:
            kind = getattr(self.stubs.service, response)
            if isinstance(request, Unreadable):
                return kind(status=error_status(self.stubs, request))
            try:
                return await method(self, request, context)
            except CoordinatorError as error:
                return kind(status=error_status(self.stubs, error))
            except Exception:
                log.exception("gRPC %s failed", method.__name__)
                return kind(status=status(self.stubs, "INTERNAL_ERROR", INTERNAL))

        return handler  # type: ignore[return-value]  # functools.wraps keeps method's signature

    return wrap


def overall(stubs: Stubs, entries: list[Any], some_failed: str) -> Any:
    """A response's own status: its one entry's, OK for all OK, else MULTIPLE_RESULTS."""
    if len(entries) == 1:
        return entries[0].status
    ok = stubs.code("OK")
    if all(entry.status.code == ok for entry in entries):
        return status(stubs)
    return status(stubs, "MULTIPLE_RESULTS", some_failed)
