"""A RocketMQ client's Telemetry stream: its Settings, and the check-backs it is sent.

A client opens the stream after its first route lookup and writes its
Settings on it (again every 300 s). Each Settings is answered with the
settings echoed, status OK, and what the clients copy from it:
`publishing.max_body_size` (0 would make every send fail) and for
producers an exponential `backoff_policy` (the Node client crashes without).

A producer's stream whose Settings announce topic T makes the client a live
instance of T's producer group (`convert.producer_group_of`: T itself) in
the producer registry, under its client id, for as long as the stream is
open. The stream then long-polls the check-back engine for the requests
addressed to that instance, exactly as an HTTP producer polls, and writes
each as a `recover_orphaned_transaction_command`.
So the same check budget, immunity, discard and expiry rules apply, and while
no producer of T has a stream open, T's check-backs wait without using up
their budget (the Python client may take up to ~600 s to announce itself
again after a coordinator restart). Consumers' streams are never sent one:
the Python SimpleConsumer's reader dies on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.core.auth import Authenticator
from coordinator.domain.checkback import CheckRequest
from coordinator.domain.delivery import FilterType
from coordinator.domain.errors import CoordinatorError, DatabaseUnavailable, InvalidMessage
from coordinator.domain.rules import check_instance, check_topic
from coordinator.grpc import convert
from coordinator.grpc.calls import Caller, DoorPart
from coordinator.grpc.consumer_settings import fill_consumer_answer
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


class TelemetryDoor(DoorPart):
    """Every open Telemetry stream of this server, by client id."""

    def __init__(
        self, core: Coordinator, authenticator: Authenticator, settings: Settings, stubs: Stubs
    ) -> None:
        super().__init__(core, authenticator, settings, stubs)
        self.on_subscription: Subscribe | None = None
        self._streams: dict[str, set[_Stream]] = {}
        self._cleanups: set[asyncio.Task[None]] = set()
        self._closing = asyncio.Event()  # the server stops: every stream ends

    async def serve(
        self, request_iterator: AsyncIterator[Any], context: Any, caller: Caller
    ) -> None:
        if caller.client_id is None:
            await context.write(
                self.stubs.service.TelemetryCommand(
                    status=status(
                        self.stubs, "CLIENT_ID_REQUIRED", "send the x-mq-client-id header"
                    )
                )
            )
            return
        stream = _Stream(self, context, caller, caller.client_id)
        self._streams.setdefault(caller.client_id, set()).add(stream)
        try:
            async for command in self._until_closing(request_iterator):
                await stream.handle(command)
        finally:
            self._closed(stream)

    async def _until_closing(self, commands: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """The client's commands, until it ends its stream or the door closes.

        On closing the handler returns, so the client sees its stream end with
        OK rather than the CANCELLED of a server that stopped under it.
        """
        commands = aiter(commands)
        closing = asyncio.ensure_future(self._closing.wait())
        command: asyncio.Future[Any] | None = None
        try:
            while True:
                command = asyncio.ensure_future(anext(commands))
                await asyncio.wait((command, closing), return_when=asyncio.FIRST_COMPLETED)
                if not command.done():
                    return
                try:
                    received = command.result()
                except StopAsyncIteration:
                    return
                yield received
        finally:
            closing.cancel()
            if command is not None:
                command.cancel()

    def begin_close(self) -> None:
        """End every stream now (and any opened from here on)."""
        self._closing.set()

    def _closed(self, stream: _Stream) -> None:
        streams = self._streams.get(stream.client_id, set())
        streams.discard(stream)
        if not streams:
            self._streams.pop(stream.client_id, None)
        # The stream's task may be cancelled (the client went away): its
        # cleanup, which waits for the database, runs on a task of its own.
        task = asyncio.create_task(stream.close(leave=not streams))
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)

    def is_push_consumer(self, client_id: str | None) -> bool:
        """Whether the client's open stream announced a PushConsumer."""
        push = self.stubs.definition.PUSH_CONSUMER
        streams = self._streams.get(client_id, ()) if client_id is not None else ()
        return any(stream.client_type == push for stream in streams)

    async def client_left(self, client_id: str) -> None:
        """NotifyClientTermination: the client's producer instances leave the registry now."""
        for stream in list(self._streams.get(client_id, ())):
            await stream.stop_checks()
            await stream.leave()

    async def close(self) -> None:
        for streams in list(self._streams.values()):
            for stream in list(streams):
                await stream.stop_checks()
        if self._cleanups:
            await asyncio.gather(*self._cleanups, return_exceptions=True)


@dataclass(eq=False)
class _Stream:
    door: TelemetryDoor
    context: Any
    caller: Caller
    client_id: str
    groups: set[str] = field(default_factory=set)  # the producer groups it is an instance of
    client_type: int | None = None  # a consumer's, from its Settings
    _checks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _writing: asyncio.Lock = field(default_factory=asyncio.Lock)
    _long_poll: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @property
    def stubs(self) -> Stubs:
        return self.door.stubs

    async def write(self, command: Any) -> None:
        async with self._writing:
            await self.context.write(command)

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

    async def _producer(self, topics: list[str]) -> None:
        principal = self.caller.principal
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
        new = [group for group in groups if group not in self._checks]
        for group in new:
            # Registered before the answer: once a client has it, its
            # transactions' check-backs come to this stream.
            await self.door.core.checkback.heartbeat(group, self.client_id)
        if new and not self._checks:
            # A producer's stream is one long poll of its token for as long
            # as it is open, like an HTTP producer's check-back poll.
            self._long_poll.enter_context(self.door.authenticator.limits.long_poll(principal))
        for group in new:
            self.groups.add(group)
            self._checks[group] = asyncio.create_task(
                self._check_backs(group), name=f"check-backs {group} {self.client_id}"
            )

    async def _consumer(self, subscription: Any) -> None:
        group = subscription.group.name
        fifo = subscription.fifo if subscription.HasField("fifo") else None
        for entry in subscription.subscriptions:
            expression, filter_type = convert.filter_of(self.stubs, entry.expression)
            topic = entry.topic.name
            self.caller.principal.require_consume(group, topic)
            assert self.door.on_subscription is not None
            await self.door.on_subscription(group, topic, expression, filter_type, fifo)

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
            longest_poll_seconds=self.door.settings.max_long_poll_seconds,
        )

    def _answer(self, settings: Any) -> Any:
        definition = self.stubs.definition
        answer = definition.Settings()
        answer.CopyFrom(settings)
        answer.request_timeout.CopyFrom(convert.duration_of(REQUEST_TIMEOUT_SECONDS))
        if settings.client_type == definition.PRODUCER:
            answer.publishing.max_body_size = min(self.door.settings.max_body_bytes, 2**31 - 1)
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
        settings = self.door.settings
        wait = min(
            LONGEST_CHECK_POLL_SECONDS,
            settings.producer_ttl_seconds / 3,
            settings.max_long_poll_seconds,
        )
        # Until the core stops: its polls then answer at once, with nothing.
        while not self.door.core.stopping:
            try:
                requests = await self.door.core.checkback.poll(
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
        self._long_poll.close()

    async def leave(self) -> None:
        for group in self.groups:
            try:
                await self.door.core.checkback.leave(group, self.client_id)
            except CoordinatorError as error:
                # Unreachable database: the instance stops counting as live
                # after producer_ttl_seconds anyway.
                log.info("producer %s of %s did not leave: %s", self.client_id, group, error)

    async def close(self, *, leave: bool) -> None:
        await self.stop_checks()
        if leave:
            await self.leave()
