"""The SimpleConsumer's RPCs: ReceiveMessage, AckMessage, ChangeInvisibleDuration, and
ForwardMessageToDeadLetterQueue.

A SimpleConsumer's group and its subscription (from its Settings on the
Telemetry stream, and restated by every receive's filter expression) are a
subscription like one made over HTTP; a message committed through either
door reaches the subscribers of both. A waiting receive holds one of its
token's long polls.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from coordinator.core import Coordinator
from coordinator.core.auth import Authenticator
from coordinator.core.configs import GrpcDoorConfig
from coordinator.domain.access import Principal
from coordinator.domain.delivery import (
    AckOutcome,
    InvisibleDurationChange,
    ReceivedMessage,
)
from coordinator.domain.errors import CoordinatorError, InvalidMessage, NotFound
from coordinator.domain.rules import (
    DEFAULT_INVISIBLE_SECONDS,
    DEFAULT_MAX_MESSAGES,
    MAX_MESSAGES_LIMIT,
)
from coordinator.grpc import convert
from coordinator.grpc.calls import (
    INTERNAL,
    DoorPart,
    answered,
    consumer_call,
    overall,
)
from coordinator.grpc.consumer_settings import backoff_seconds
from coordinator.grpc.status import DoorError, Unreadable, error_status, status
from coordinator.grpc.stubs import Stubs
from coordinator.grpc.subscriber import Subscriber

log = logging.getLogger(__name__)

# RocketMQ's clients wait for a receive until its long polling timeout plus
# their request timeout (3 s by default): answer well before that.
RECEIVE_ANSWER_MARGIN_SECONDS = 1.0
DEFAULT_LONG_POLLING_SECONDS = 20.0  # the Python client's, when a request names none

# What each outcome of an ack answers: a RocketMQ code and a sentence.
_ACK_ANSWERS = {
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


class Consuming(DoorPart):
    """The consumers' RPCs, each a thin call into the core's delivery."""

    def __init__(
        self,
        core: Coordinator,
        authenticator: Authenticator,
        config: GrpcDoorConfig,
        stubs: Stubs,
        *,
        subscriber: Subscriber,
        is_push_consumer: Callable[[str | None], bool],
    ) -> None:
        super().__init__(core, authenticator, config, stubs)
        self._subscriber = subscriber  # shared with the Telemetry streams' Settings
        # Whether a client id is a PushConsumer's (its Telemetry stream says).
        self._is_push_consumer = is_push_consumer

    # --- receiving -----------------------------------------------------------
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
        caller, group, topic = consumer_call(
            context, self.authenticator, request.group, request.message_queue.topic
        )
        expression, filter_type = convert.filter_of(self.stubs, request.filter_expression)
        await self._subscriber.subscribed(group, topic, expression, filter_type)
        invisible = (
            convert.seconds_of(request.invisible_duration)
            if request.HasField("invisible_duration")
            else DEFAULT_INVISIBLE_SECONDS
        )
        batch = request.batch_size or DEFAULT_MAX_MESSAGES
        if not 0 < batch <= MAX_MESSAGES_LIMIT:
            raise InvalidMessage(f"batch size must be 1..{MAX_MESSAGES_LIMIT}, got {batch}")
        wait = self._wait_seconds(request, context)
        receive = functools.partial(
            self.core.delivery.receive,
            group,
            max_messages=batch,
            invisible_seconds=invisible,
            wait_seconds=wait,
            topic=topic,
        )
        with self._long_poll(caller.principal, wait):
            try:
                received = await receive()
            except NotFound:
                # The subscription went behind this process's memory of it (the
                # retention job removed an idle group): state it again, once.
                self._subscriber.forget(group, topic)
                await self._subscriber.subscribed(group, topic, expression, filter_type)
                received = await receive()
        return invisible, received

    def _wait_seconds(self, request: Any, context: Any) -> float:
        wait = (
            convert.seconds_of(request.long_polling_timeout)
            if request.HasField("long_polling_timeout")
            else DEFAULT_LONG_POLLING_SECONDS
        )
        if wait < 0:
            raise DoorError("ILLEGAL_POLLING_TIME", f"long polling timeout {wait:g} s is negative")
        wait = min(wait, self.config.max_long_poll_seconds)
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

    # --- after receiving -----------------------------------------------------
    @answered("AckMessageResponse")
    async def AckMessage(self, request: Any, context: Any) -> Any:
        _, group, _ = consumer_call(context, self.authenticator, request.group, request.topic)
        handles = [entry.receipt_handle for entry in request.entries]
        try:
            results = await self.core.delivery.ack_batch(group, handles)
        except InvalidMessage as error:
            raise DoorError("INVALID_RECEIPT_HANDLE", error.message) from None
        entries = [
            self.stubs.service.AckMessageResultEntry(
                message_id=entry.message_id,
                receipt_handle=entry.receipt_handle,
                status=status(self.stubs, *_ACK_ANSWERS[result.outcome]),
            )
            for entry, result in zip(request.entries, results, strict=True)
        ]
        top = overall(self.stubs, entries, "some messages were not acked")
        return self.stubs.service.AckMessageResponse(status=top, entries=entries)

    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        # Not @answered: the Python client reads the receipt handle before the
        # status, so a refusal still carries one (the handle it sent).
        response = self.stubs.service.ChangeInvisibleDurationResponse
        if isinstance(request, Unreadable):
            return response(status=error_status(self.stubs, request))
        try:
            caller, group, _ = consumer_call(
                context, self.authenticator, request.group, request.topic
            )
            if not request.HasField("invisible_duration"):
                raise DoorError("ILLEGAL_INVISIBLE_TIME", "give the new invisible duration")
            seconds = convert.seconds_of(request.invisible_duration)
            if self._is_push_consumer(caller.client_id):
                change = await self._nack(group, request.receipt_handle, seconds)
            else:
                change = await self.core.delivery.change_invisible_duration(
                    group, request.receipt_handle, seconds
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

    async def _nack(self, group: str, handle: str, seconds: float) -> InvisibleDurationChange:
        """A PushConsumer's nack: the message comes back after the group's backoff at the earliest.

        The Python client asks for the backoff of the attempt that failed;
        the Node client (1.0.8) for next to nothing (it reads its delays in
        seconds and sends them as milliseconds). The first change already
        holds the message for the shortest backoff, so no receive takes it
        between the two.
        """
        change = await self.core.delivery.change_invisible_duration(
            group, handle, max(seconds, backoff_seconds(1))
        )
        floor = backoff_seconds(change.delivery_attempt)
        if seconds >= floor or floor <= backoff_seconds(1):
            return change
        return await self.core.delivery.change_invisible_duration(
            group, change.receipt_handle, floor
        )

    @answered("ForwardMessageToDeadLetterQueueResponse")
    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:
        _, group, _ = consumer_call(context, self.authenticator, request.group, request.topic)
        await self.core.delivery.dead_letter(group, request.receipt_handle)
        return self.stubs.service.ForwardMessageToDeadLetterQueueResponse(
            status=status(self.stubs, "OK", "moved to the dead letters")
        )
