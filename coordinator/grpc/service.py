"""`apache.rocketmq.v2.MessagingService`: each RPC authenticates, checks, and calls the core.

The mapping onto the coordinator's model:
- producer group: RocketMQ 5 has none; a transactional message's topic
  stands for it, as in RocketMQ's proxy. Its check-backs go to the producers
  whose Telemetry stream announced the topic (`telemetry.py`).
- consumer group: a SimpleConsumer's group and its subscription (from its
  Settings, and restated by every receive's filter expression) are a
  subscription like one made over HTTP; a message committed through either
  door reaches the subscribers of both.
- one queue per topic (id 0) on one broker: this server.

Every RPC goes through the same authentication, permissions and limits as
HTTP: the token comes in the `authorization` header (`credentials.py`),
each call counts against the token's rate, and a waiting receive or a
producer's stream holds one of its long polls.

A refusal is a RocketMQ status in the response (`status.py`) with a
sentence; an unexpected failure is logged and answered INTERNAL_ERROR,
never a broken stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.core.auth import Authenticator
from coordinator.domain.access import Principal
from coordinator.domain.delivery import AckOutcome, ReceivedMessage
from coordinator.domain.errors import CoordinatorError, InvalidMessage
from coordinator.domain.messages import EndRequest, SendResult
from coordinator.domain.rules import (
    DEFAULT_INVISIBLE_SECONDS,
    DEFAULT_MAX_MESSAGES,
    MAX_MESSAGES_LIMIT,
    SUBSCRIBE_ALL,
    check_consumer_group,
    check_topic,
)
from coordinator.domain.states import Resolution
from coordinator.grpc import convert, credentials
from coordinator.grpc.status import DoorError, Unreadable, error_status, status
from coordinator.grpc.stubs import Stubs
from coordinator.grpc.telemetry import Caller, TelemetryDoor

log = logging.getLogger(__name__)

# RocketMQ's clients wait for a receive until its long polling timeout plus
# their request timeout (3 s by default): answer well before that.
RECEIVE_ANSWER_MARGIN_SECONDS = 1.0
DEFAULT_LONG_POLLING_SECONDS = 20.0  # the Python client's, when a request names none
INTERNAL = "the coordinator failed on this request (see its log); retry it"

Handler = TypeVar("Handler", bound=Callable[..., Awaitable[Any]])


def _answered(response: str) -> Callable[[Handler], Handler]:
    """A unary RPC whose refusals and failures become `response` with a status."""

    def wrap(method: Handler) -> Handler:
        @functools.wraps(method)
        async def handler(self: MessagingService, request: Any, context: Any) -> Any:
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

        return handler  # type: ignore[return-value]

    return wrap


@dataclass(frozen=True, slots=True)
class _Unsupported:
    what: str
    instead: str


_UNSUPPORTED = {
    "QueryAssignment": _Unsupported(
        "queue assignment (PushConsumer)", "receive with a SimpleConsumer"
    ),
    "UpdateOffset": _Unsupported("offsets (PullConsumer)", "receive with a SimpleConsumer"),
    "GetOffset": _Unsupported("offsets (PullConsumer)", "receive with a SimpleConsumer"),
    "QueryOffset": _Unsupported("offsets (PullConsumer)", "receive with a SimpleConsumer"),
    "RecallMessage": _Unsupported("recalling delayed messages", "send without a delivery time"),
    "SyncLiteSubscription": _Unsupported("lite topics", "subscribe to a topic"),
}


class MessagingService:
    """The servicer grpc.aio calls (the generated base class is not needed for that)."""

    def __init__(
        self,
        core: Coordinator,
        authenticator: Authenticator,
        settings: Settings,
        stubs: Stubs,
        *,
        port: int,
    ) -> None:
        self.core = core
        self.authenticator = authenticator
        self.settings = settings
        self.stubs = stubs
        self.port = port
        self.telemetry = TelemetryDoor(core, authenticator, settings, stubs)
        # (group, topic) -> expression last written, so that a receive which
        # restates an unchanged subscription costs no database round trip.
        self._subscribed: dict[tuple[str, str], str] = {}
        self.telemetry.on_subscription = self.subscribed
        for name, unsupported in _UNSUPPORTED.items():
            setattr(self, name, self._unsupported(name, unsupported))

    def begin_close(self) -> None:
        """The server stops: Telemetry streams end (receives end with the core's stopping)."""
        self.telemetry.begin_close()

    async def close(self) -> None:
        await self.telemetry.close()

    # --- the caller --------------------------------------------------------
    def caller(self, context: Any) -> Caller:
        metadata = dict(context.invocation_metadata() or ())
        token = credentials.token_of(metadata.get("authorization"), metadata.get("x-mq-date-time"))
        principal = self.authenticator.authenticate_token(
            token, how_to_send=credentials.HOW_TO_SEND
        )
        namespace = metadata.get("x-mq-namespace", "")
        if namespace:
            raise DoorError("UNSUPPORTED", f"namespaces are not supported (got {namespace!r})")
        return Caller(principal, metadata.get("x-mq-client-id") or None)

    def topic(self, resource: Any) -> str:
        if resource.resource_namespace:
            raise DoorError(
                "UNSUPPORTED",
                f"namespaces are not supported (got {resource.resource_namespace!r})",
            )
        try:
            return check_topic(resource.name)
        except InvalidMessage as error:
            raise DoorError("ILLEGAL_TOPIC", error.message) from None

    def group(self, resource: Any) -> str:
        try:
            return check_consumer_group(resource.name)
        except InvalidMessage as error:
            raise DoorError("ILLEGAL_CONSUMER_GROUP", error.message) from None

    async def subscribed(
        self, group: str, topic: str, expression: str, fifo: bool | None = None
    ) -> None:
        """Make sure `group` subscribes to `topic` with `expression` (written only on change)."""
        key = (group, topic)
        if fifo is None and self._subscribed.get(key) == expression:
            return
        subscription = await self.core.delivery.ensure_subscribed(
            group, topic, expression, fifo=fifo
        )
        self._subscribed[key] = subscription.expression

    # --- routes and liveness -------------------------------------------------
    @_answered("QueryRouteResponse")
    async def QueryRoute(self, request: Any, context: Any) -> Any:
        self.caller(context)
        definition = self.stubs.definition
        self.topic(request.topic)
        # The access point the client used reaches this server; echo it (its
        # address scheme included) rather than guessing a reachable address.
        endpoints = request.endpoints if request.endpoints.addresses else self._own_endpoints()
        queue = definition.MessageQueue(
            topic=request.topic,
            id=0,
            permission=definition.READ_WRITE,
            broker=definition.Broker(name="coordinator", id=0, endpoints=endpoints),
            accept_message_types=[definition.NORMAL, definition.FIFO, definition.TRANSACTION],
        )
        return self.stubs.service.QueryRouteResponse(
            status=status(self.stubs), message_queues=[queue]
        )

    def _own_endpoints(self) -> Any:
        definition = self.stubs.definition
        host = self.settings.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        scheme = definition.IPv4
        if ":" in host:
            scheme = definition.IPv6
        elif not host.replace(".", "").isdigit():
            scheme = definition.DOMAIN_NAME
        return definition.Endpoints(
            scheme=scheme, addresses=[definition.Address(host=host, port=self.port)]
        )

    @_answered("HeartbeatResponse")
    async def Heartbeat(self, request: Any, context: Any) -> Any:
        # A producer is live while its Telemetry stream is open (telemetry.py),
        # which is what check-backs need; a heartbeat only proves the token.
        self.caller(context)
        return self.stubs.service.HeartbeatResponse(status=status(self.stubs))

    @_answered("NotifyClientTerminationResponse")
    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:
        caller = self.caller(context)
        if caller.client_id is not None:
            await self.telemetry.client_left(caller.client_id)
        return self.stubs.service.NotifyClientTerminationResponse(status=status(self.stubs))

    async def Telemetry(self, request_iterator: AsyncIterator[Any], context: Any) -> None:
        try:
            caller = self.caller(context)
        except CoordinatorError as error:
            command = self.stubs.service.TelemetryCommand(status=error_status(self.stubs, error))
            await context.write(command)
            return
        await self.telemetry.serve(request_iterator, context, caller)

    # --- producing -----------------------------------------------------------
    @_answered("SendMessageResponse")
    async def SendMessage(self, request: Any, context: Any) -> Any:
        caller = self.caller(context)
        if not request.messages:
            raise InvalidMessage("send at least one message")
        if len(request.messages) > self.settings.max_batch_size:
            raise InvalidMessage(
                f"at most {self.settings.max_batch_size} messages per send, "
                f"got {len(request.messages)}"
            )
        if len(request.messages) == 1:
            # What the clients send: no task per message for gather to wrap.
            entries = [await self._send_one(caller.principal, request.messages[0])]
        else:
            entries = await asyncio.gather(
                *(self._send_one(caller.principal, message) for message in request.messages)
            )
        top = self._overall(entries, "some messages were not stored")
        return self.stubs.service.SendMessageResponse(status=top, entries=entries)

    def _overall(self, entries: list[Any], some_failed: str) -> Any:
        """A response's own status: its one entry's, OK for all OK, else MULTIPLE_RESULTS."""
        if len(entries) == 1:
            return entries[0].status
        ok = self.stubs.code("OK")
        if all(entry.status.code == ok for entry in entries):
            return status(self.stubs)
        return status(self.stubs, "MULTIPLE_RESULTS", some_failed)

    async def _send_one(self, principal: Principal, message: Any) -> Any:
        entry = self.stubs.service.SendResultEntry
        try:
            self.topic(message.topic)
            incoming = convert.incoming(self.stubs, message, self.settings)
            principal.require_produce(incoming.message.topic, incoming.message.producer_group)
            transactions = self.core.transactions
            store = transactions.prepare if incoming.transactional else transactions.send
            result: SendResult = await store(incoming.message)
        except CoordinatorError as error:
            return entry(
                status=error_status(self.stubs, error),
                message_id=message.system_properties.message_id,
            )
        return entry(
            status=status(self.stubs, "OK", "stored" if result.created else "stored before"),
            message_id=result.message_id,
            transaction_id=result.transaction_id or "",
            offset=result.offset,
        )

    @_answered("EndTransactionResponse")
    async def EndTransaction(self, request: Any, context: Any) -> Any:
        caller = self.caller(context)
        definition = self.stubs.definition
        topic = self.topic(request.topic)
        caller.principal.require_producer_group(topic)
        if not request.transaction_id:
            raise DoorError(
                "INVALID_TRANSACTION_ID", "give the transaction id that SendMessage returned"
            )
        # UNSPECIFIED is what the Python client sends when its checker does
        # not know yet: check again later, as for UNKNOWN.
        resolution = {
            definition.COMMIT: Resolution.COMMIT,
            definition.ROLLBACK: Resolution.ROLLBACK,
        }.get(request.resolution, Resolution.UNKNOWN)
        result = await self.core.transactions.end(
            EndRequest(
                transaction_id=request.transaction_id,
                producer_group=topic,
                resolution=resolution,
                from_check=request.source == definition.SOURCE_SERVER_CHECK,
                message_id=request.message_id or None,
            )
        )
        said = result.state.value if result.changed else f"{result.state.value} (unchanged)"
        return self.stubs.service.EndTransactionResponse(status=status(self.stubs, "OK", said))

    # --- consuming -----------------------------------------------------------
    async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        response = self.stubs.service.ReceiveMessageResponse
        try:
            invisible, received = await self._receive(request, context)
        except CoordinatorError as error:
            yield response(status=error_status(self.stubs, error))
            return
        except Exception:
            log.exception("gRPC ReceiveMessage failed")
            yield response(status=status(self.stubs, "INTERNAL_ERROR", INTERNAL))
            return
        if not received:
            yield response(status=status(self.stubs, "MESSAGE_NOT_FOUND", "no new message"))
            return
        yield response(status=status(self.stubs))
        for message in received:
            yield response(message=self._received(message, invisible))
        yield response(delivery_timestamp=convert.timestamp_of(datetime.now(UTC)))

    async def _receive(self, request: Any, context: Any) -> tuple[float, list[ReceivedMessage]]:
        if isinstance(request, Unreadable):
            raise request
        caller = self.caller(context)
        group = self.group(request.group)
        topic = self.topic(request.message_queue.topic)
        caller.principal.require_consume(group, topic)
        await self.subscribed(group, topic, self._expression(request.filter_expression))
        invisible = (
            convert.seconds_of(request.invisible_duration)
            if request.HasField("invisible_duration")
            else DEFAULT_INVISIBLE_SECONDS
        )
        batch = request.batch_size or DEFAULT_MAX_MESSAGES
        if not 0 < batch <= MAX_MESSAGES_LIMIT:
            raise InvalidMessage(f"batch size must be 1..{MAX_MESSAGES_LIMIT}, got {batch}")
        wait = self._wait_seconds(request, context)
        with self._long_poll(caller.principal, wait):
            received = await self.core.delivery.receive(
                group,
                max_messages=batch,
                invisible_seconds=invisible,
                wait_seconds=wait,
                topic=topic,
            )
        return invisible, received

    def _wait_seconds(self, request: Any, context: Any) -> float:
        wait = (
            convert.seconds_of(request.long_polling_timeout)
            if request.HasField("long_polling_timeout")
            else DEFAULT_LONG_POLLING_SECONDS
        )
        if wait < 0:
            raise DoorError("ILLEGAL_POLLING_TIME", f"long polling timeout {wait:g} s is negative")
        wait = min(wait, self.settings.max_long_poll_seconds)
        remaining = context.time_remaining()
        if remaining is not None:
            wait = min(wait, remaining - RECEIVE_ANSWER_MARGIN_SECONDS)
        return max(wait, 0.0)

    @contextlib.contextmanager
    def _long_poll(self, principal: Principal, wait: float) -> Iterator[None]:
        if wait <= 0:
            yield
            return
        with self.authenticator.limits.long_poll(principal):
            yield

    def _expression(self, expression: Any) -> str:
        if expression.type == self.stubs.definition.SQL:
            raise DoorError(
                "ILLEGAL_FILTER_EXPRESSION",
                "SQL92 filter expressions are not supported: filter by tag (TagA || TagB)",
            )
        return expression.expression.strip() or SUBSCRIBE_ALL

    def _received(self, message: ReceivedMessage, invisible: float) -> Any:
        return convert.outgoing(
            self.stubs,
            message,
            namespace="",
            transactional=message.transaction_id is not None,
            receipt_handle=message.receipt_handle,
            delivery_attempt=message.delivery_attempt,
            invisible_seconds=invisible,
            stored_at=message.committed_at,
        )

    @_answered("AckMessageResponse")
    async def AckMessage(self, request: Any, context: Any) -> Any:
        caller = self.caller(context)
        group = self.group(request.group)
        topic = self.topic(request.topic)
        caller.principal.require_consume(group, topic)
        handles = [entry.receipt_handle for entry in request.entries]
        try:
            results = await self.core.delivery.ack_batch(group, handles)
        except InvalidMessage as error:
            raise DoorError("INVALID_RECEIPT_HANDLE", error.message) from None
        said = {
            AckOutcome.ACKED: ("OK", "acked"),
            AckOutcome.STALE: (
                "INVALID_RECEIPT_HANDLE",
                "the receipt handle is stale: the message was received again since",
            ),
            AckOutcome.NOT_FOUND: (
                "NOT_FOUND",
                "no unacked message with this receipt handle: acked already, "
                "dead-lettered, or never received by this group",
            ),
        }
        entries = [
            self.stubs.service.AckMessageResultEntry(
                message_id=entry.message_id,
                receipt_handle=entry.receipt_handle,
                status=status(self.stubs, *said[result.outcome]),
            )
            for entry, result in zip(request.entries, results, strict=True)
        ]
        top = self._overall(entries, "some messages were not acked")
        return self.stubs.service.AckMessageResponse(status=top, entries=entries)

    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        # Not @_answered: the Python client reads the receipt handle before the
        # status, so a refusal still carries one (the handle it sent).
        response = self.stubs.service.ChangeInvisibleDurationResponse
        if isinstance(request, Unreadable):
            return response(status=error_status(self.stubs, request))
        try:
            caller = self.caller(context)
            group = self.group(request.group)
            topic = self.topic(request.topic)
            caller.principal.require_consume(group, topic)
            if not request.HasField("invisible_duration"):
                raise DoorError("ILLEGAL_INVISIBLE_TIME", "give the new invisible duration")
            change = await self.core.delivery.change_invisible_duration(
                group, request.receipt_handle, convert.seconds_of(request.invisible_duration)
            )
        except CoordinatorError as error:
            return response(
                status=error_status(self.stubs, error), receipt_handle=request.receipt_handle
            )
        except Exception:
            log.exception("gRPC ChangeInvisibleDuration failed")
            return response(
                status=status(self.stubs, "INTERNAL_ERROR", INTERNAL),
                receipt_handle=request.receipt_handle,
            )
        return response(status=status(self.stubs), receipt_handle=change.receipt_handle)

    @_answered("ForwardMessageToDeadLetterQueueResponse")
    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:
        caller = self.caller(context)
        group = self.group(request.group)
        topic = self.topic(request.topic)
        caller.principal.require_consume(group, topic)
        await self.core.delivery.dead_letter(group, request.receipt_handle)
        return self.stubs.service.ForwardMessageToDeadLetterQueueResponse(
            status=status(self.stubs, "OK", "moved to the dead letters")
        )

    # --- what the coordinator does not offer ---------------------------------
    async def PullMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        yield self.stubs.service.PullMessageResponse(
            status=status(
                self.stubs,
                "UNSUPPORTED",
                "PullMessage (PullConsumer offsets) is not supported: receive with a "
                "SimpleConsumer",
            )
        )

    def _unsupported(self, name: str, unsupported: _Unsupported) -> Callable[..., Awaitable[Any]]:
        kind = getattr(self.stubs.service, f"{name}Response")

        async def answer(request: Any, context: Any) -> Any:
            return kind(
                status=status(
                    self.stubs,
                    "UNSUPPORTED",
                    f"{name}: {unsupported.what} is not supported; {unsupported.instead}",
                )
            )

        return answer
