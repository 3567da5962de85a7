"""One client's Telemetry stream: its Settings answered, its check-backs written, its
token checked again (see telemetry.py for what a stream does and why).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from coordinator.domain.access import ANONYMOUS, Principal
from coordinator.domain.checkback import CheckRequest
from coordinator.domain.delivery import FilterType
from coordinator.domain.errors import (
    CoordinatorError,
    DatabaseUnavailable,
    InvalidMessage,
    PermissionDenied,
    RateLimited,
    Unauthenticated,
)
from coordinator.domain.rules import check_instance, check_topic
from coordinator.grpc import convert
from coordinator.grpc.calls import Caller, DoorPart
from coordinator.grpc.consumer_settings import fill_consumer_answer
from coordinator.grpc.credentials import HOW_TO_SEND
from coordinator.grpc.status import DoorError, Unreadable, error_status, status
from coordinator.grpc.stubs import Stubs

log = logging.getLogger(__name__)


# How long one check-back poll of a stream waits. Each poll also refreshes the
# instance in the registry, so it must come well within producer_ttl_seconds.
LONGEST_CHECK_POLL_SECONDS = 10.0
CHECK_REQUESTS_PER_POLL = 32
# The retry policy handed to producers (RocketMQ's proxy default shape).
BACKOFF_ATTEMPTS = 3
BACKOFF_INITIAL_SECONDS = 0.01
BACKOFF_MAX_SECONDS = 1.0
BACKOFF_MULTIPLIER = 2.0
REQUEST_TIMEOUT_SECONDS = 3.0

Subscribe = Callable[[str, str, str, FilterType, bool | None], Awaitable[None]]

# How a stream ended by the coordinator ends at the gRPC level (the RocketMQ
# status is written on the stream first).
_GRPC_CODES: dict[type[CoordinatorError], grpc.StatusCode] = {
    Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    RateLimited: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


async def end_stream(stubs: Stubs, context: Any, error: CoordinatorError) -> None:
    """End a stream the coordinator refuses or stops serving: the RocketMQ status and
    its sentence on the stream, then the gRPC status."""
    with contextlib.suppress(Exception):  # the client may be gone already
        await context.write(stubs.service.TelemetryCommand(status=error_status(stubs, error)))
    code = next(
        (code for kind, code in _GRPC_CODES.items() if isinstance(error, kind)),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    context.set_code(code)
    context.set_details(error.message)


@dataclass(eq=False)
class TelemetryStream:
    door: DoorPart
    subscribe: Subscribe | None
    context: Any
    caller: Caller
    client_id: str
    principal: Principal  # the caller's, as of the last reread of the tokens
    groups: set[str] = field(default_factory=set)  # the producer groups it is an instance of
    subscribed: set[tuple[str, str]] = field(default_factory=set)  # a consumer's (group, topic)
    client_type: int | None = None  # a consumer's, from its Settings
    reason: CoordinatorError | None = None  # why the coordinator ended the stream
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    long_poll: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _checks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _writing: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def stubs(self) -> Stubs:
        return self.door.stubs

    async def write(self, command: Any) -> None:
        async with self._writing:
            await self.context.write(command)

    # --- its token ----------------------------------------------------------
    def recheck(self) -> bool:
        """Whether the stream's token still covers all it serves; if not, it ends."""
        if self.reason is not None:
            return False
        principal = self.door.authenticator.current(self.principal)
        try:
            if principal is None:
                raise Unauthenticated(self._revoked())
            for group in self.groups:
                principal.require_producer_group(group)
            for group, topic in self.subscribed:
                principal.require_consume(group, topic)
        except CoordinatorError as error:
            self.reason = error
            self.ended.set()
            return False
        self.principal = principal
        return True

    async def handle(self, command: Any) -> None:
        if isinstance(command, Unreadable):
            await self.write(
                self.stubs.service.TelemetryCommand(status=error_status(self.stubs, command))
            )
            return
        if command.WhichOneof("command") != "settings":
            return  # thread stack traces and verify results: nothing asks for them
        answer = self._answer(command.settings)
        try:
            await self._settings(command.settings)
            await self._consumer_answer(answer)
        except CoordinatorError as error:
            reply = error_status(self.stubs, error)
        except Exception:
            log.exception("gRPC Telemetry settings failed")
            reply = status(self.stubs, "INTERNAL_ERROR", "the coordinator failed on these settings")
        else:
            reply = status(self.stubs)
        await self.write(self.stubs.service.TelemetryCommand(status=reply, settings=answer))

    async def _settings(self, settings: Any) -> None:
        definition = self.stubs.definition
        kind = settings.client_type
        if kind == definition.PRODUCER:
            await self._producer([topic.name for topic in settings.publishing.topics])
        elif kind in (definition.SIMPLE_CONSUMER, definition.PUSH_CONSUMER):
            self.client_type = kind
            await self._consumer(settings.subscription)
        else:
            raise DoorError(
                "UNRECOGNIZED_CLIENT_TYPE",
                "only producers, simple consumers and push consumers are supported by this "
                "coordinator",
            )

    def _revoked(self) -> str:
        if self.principal.name == ANONYMOUS:  # a token was created: none is open any more
            return "this coordinator needs a token now: reconnect with one" + HOW_TO_SEND
        return f"the token {self.principal.name!r} of this stream was revoked"

    def _bounded(self, topics: int) -> None:
        most = self.door.config.max_topics_per_stream
        if topics > most:
            raise DoorError(
                "BAD_REQUEST",
                f"a Telemetry stream may announce at most {most} topics "
                f"(max_topics_per_stream); these settings make it {topics}",
            )

    async def _producer(self, topics: list[str]) -> None:
        principal = self.principal
        self._bounded(len(set(topics) | self.groups))
        groups = []
        for topic in topics:
            try:
                check_topic(topic)
            except InvalidMessage as error:
                raise DoorError("ILLEGAL_TOPIC", error.message) from None
            group = convert.producer_group_of(topic)
            principal.require_producer_group(group)
            check_instance(group, self.client_id)
            groups.append(group)
        new = [group for group in dict.fromkeys(groups) if group not in self._checks]
        for group in new:
            # Registered before the answer: once a client has it, its
            # transactions' check-backs come to this stream.
            await self.door.core.checkback.producers.heartbeat(group, self.client_id)
        for group in new:
            self.groups.add(group)
            self._checks[group] = asyncio.create_task(
                self._check_backs(group), name=f"check-backs {group} {self.client_id}"
            )

    async def _consumer(self, subscription: Any) -> None:
        group = subscription.group.name
        fifo = subscription.fifo if subscription.HasField("fifo") else None
        self._bounded(len({entry.topic.name for entry in subscription.subscriptions}))
        for entry in subscription.subscriptions:
            expression, filter_type = convert.filter_of(self.stubs, entry.expression)
            topic = entry.topic.name
            self.principal.require_consume(group, topic)
            assert self.subscribe is not None
            await self.subscribe(group, topic, expression, filter_type, fifo)
            self.subscribed.add((group, topic))

    async def _consumer_answer(self, answer: Any) -> None:
        """A consumer's answer carries its group's FIFO flag and retry policy."""
        if answer.WhichOneof("pub_sub") != "subscription":
            return
        group = answer.subscription.group.name
        topics = [entry.topic.name for entry in answer.subscription.subscriptions]
        fill_consumer_answer(
            self.stubs,
            answer,
            await self.door.core.delivery.subscriptions(group),
            topics,
            longest_poll_seconds=self.door.config.max_long_poll_seconds,
        )

    def _answer(self, settings: Any) -> Any:
        definition = self.stubs.definition
        answer = definition.Settings()
        answer.CopyFrom(settings)
        answer.request_timeout.CopyFrom(convert.duration_of(REQUEST_TIMEOUT_SECONDS))
        if settings.client_type == definition.PRODUCER:
            answer.publishing.max_body_size = min(self.door.config.max_body_bytes, 2**31 - 1)
            answer.publishing.validate_message_type = True
            answer.backoff_policy.CopyFrom(
                definition.RetryPolicy(
                    max_attempts=BACKOFF_ATTEMPTS,
                    exponential_backoff=definition.ExponentialBackoff(
                        initial=convert.duration_of(BACKOFF_INITIAL_SECONDS),
                        max=convert.duration_of(BACKOFF_MAX_SECONDS),
                        multiplier=BACKOFF_MULTIPLIER,
                    ),
                )
            )
        return answer

    # --- check-backs --------------------------------------------------------
    async def _check_backs(self, group: str) -> None:
        config = self.door.config
        wait = min(
            LONGEST_CHECK_POLL_SECONDS,
            config.producer_ttl_seconds / 3,
            config.max_long_poll_seconds,
        )
        # Until the core stops: its polls then answer at once, with nothing.
        while not self.door.core.stopping and self.recheck():
            try:
                requests = await self.door.core.checkback.pull.poll(
                    group,
                    self.client_id,
                    wait_seconds=wait,
                    max_requests=CHECK_REQUESTS_PER_POLL,
                )
            except DatabaseUnavailable:
                await asyncio.sleep(1.0)  # the pool reconnects within that
                continue
            except CoordinatorError as error:
                log.warning("check-backs of %s for %s: %s", group, self.client_id, error.message)
                await asyncio.sleep(wait)
                continue
            for request in requests:
                # Its token is checked at each send: a check-back carries a body.
                if not self.recheck():
                    return
                await self.write(self._recover(request))

    def _recover(self, request: CheckRequest) -> Any:
        service = self.stubs.service
        return service.TelemetryCommand(
            recover_orphaned_transaction_command=service.RecoverOrphanedTransactionCommand(
                message=convert.outgoing(self.stubs, request, namespace="", transactional=True),
                transaction_id=request.transaction_id,
            )
        )

    async def stop_checks(self) -> None:
        tasks = list(self._checks.values())
        self._checks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.long_poll.close()

    async def leave(self) -> None:
        for group in self.groups:
            try:
                await self.door.core.checkback.producers.leave(group, self.client_id)
            except CoordinatorError as error:
                # Unreachable database: the instance stops counting as live
                # after producer_ttl_seconds anyway.
                log.info("producer %s of %s did not leave: %s", self.client_id, group, error)

    async def close(self, *, leave: bool) -> None:
        await self.stop_checks()
        if leave:
            await self.leave()
