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

A stream is its token's for as long as it lasts: it holds one of the
token's long polls from its start (`max_long_polls_per_token`, the counter
HTTP's long polls share), announces at most `max_topics_per_stream` topics,
and binds its client id to the token (another token's stream or
NotifyClientTermination for that id is refused). After every reread of the
tokens, and before each check-back it writes, the stream checks its token
again: once the token is revoked, or no longer covers the stream's producer
groups or subscriptions, the stream ends with UNAUTHORIZED or FORBIDDEN and
a sentence (gRPC UNAUTHENTICATED or PERMISSION_DENIED).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

from coordinator.core import Coordinator
from coordinator.core.auth import Authenticator
from coordinator.core.configs import GrpcDoorConfig
from coordinator.domain.access import Principal
from coordinator.domain.errors import CoordinatorError, PermissionDenied
from coordinator.grpc.calls import Caller, DoorPart
from coordinator.grpc.status import status
from coordinator.grpc.stubs import Stubs
from coordinator.grpc.telemetry_stream import Subscribe, TelemetryStream, end_stream

log = logging.getLogger(__name__)


class TelemetryDoor(DoorPart):
    """Every open Telemetry stream of this server, by client id."""

    def __init__(
        self,
        core: Coordinator,
        authenticator: Authenticator,
        config: GrpcDoorConfig,
        stubs: Stubs,
        *,
        on_subscription: Subscribe,
    ) -> None:
        super().__init__(core, authenticator, config, stubs)
        # A consumer's Settings subscribe it as a receive does.
        self._on_subscription = on_subscription
        self._streams: dict[str, set[TelemetryStream]] = {}
        self._cleanups: set[asyncio.Task[None]] = set()
        self._closing = asyncio.Event()  # the server stops: every stream ends
        self._unfollow = authenticator.on_refresh(self._tokens_changed)

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
        stream = TelemetryStream(
            self, self._on_subscription, context, caller, caller.client_id, caller.principal
        )
        try:
            self._bind(stream)
            # Every stream is one long poll of its token for as long as it is
            # open, like an HTTP long poll: one counter bounds both.
            stream.long_poll.enter_context(self.authenticator.limits.long_poll(caller.principal))
        except CoordinatorError as error:
            stream.long_poll.close()
            await end_stream(self.stubs, context, error)
            return
        self._streams.setdefault(caller.client_id, set()).add(stream)
        try:
            async for command in self._until_closing(request_iterator, stream.ended):
                await stream.handle(command)
        finally:
            self._closed(stream)
        if stream.reason is not None:
            await end_stream(self.stubs, context, stream.reason)

    def _bind(self, stream: TelemetryStream) -> None:
        """A client id belongs to the token whose stream holds it."""
        for other in self._streams.get(stream.client_id, ()):
            if other.principal.name != stream.principal.name:
                raise PermissionDenied(
                    f"client id {stream.client_id!r} is held by another token's stream: "
                    "give each client an id of its own"
                )

    def _tokens_changed(self) -> None:
        """The tokens were reread: every stream checks its token again."""
        for streams in list(self._streams.values()):
            for stream in list(streams):
                stream.recheck()

    async def _until_closing(
        self, commands: AsyncIterator[Any], ended: asyncio.Event
    ) -> AsyncIterator[Any]:
        """The client's commands, until it ends its stream, the coordinator ends it, or
        the door closes.

        On closing the handler returns, so the client sees its stream end with
        OK rather than the CANCELLED of a server that stopped under it.
        """
        commands = aiter(commands)
        closing = asyncio.ensure_future(self._closing.wait())
        stopped = asyncio.ensure_future(ended.wait())
        command: asyncio.Future[Any] | None = None
        try:
            while True:
                command = asyncio.ensure_future(anext(commands))
                await asyncio.wait((command, closing, stopped), return_when=asyncio.FIRST_COMPLETED)
                if not command.done():
                    return
                try:
                    received = command.result()
                except StopAsyncIteration:
                    return
                yield received
        finally:
            closing.cancel()
            stopped.cancel()
            if command is not None:
                command.cancel()

    def begin_close(self) -> None:
        """End every stream now (and any opened from here on)."""
        self._closing.set()

    def _closed(self, stream: TelemetryStream) -> None:
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

    async def client_left(self, client_id: str, principal: Principal) -> None:
        """NotifyClientTermination: the client's producer instances leave the registry now.

        Only the token whose streams hold the client id (or an admin) may end it.
        """
        streams = list(self._streams.get(client_id, ()))
        if not principal.is_admin and any(
            stream.principal.name != principal.name for stream in streams
        ):
            raise PermissionDenied(
                f"token {principal.name!r} may not end client {client_id!r}: "
                "another token's stream holds it"
            )
        for stream in streams:
            await stream.stop_checks()
            await stream.leave()

    async def close(self) -> None:
        self._unfollow()
        for streams in list(self._streams.values()):
            for stream in list(streams):
                await stream.stop_checks()
        if self._cleanups:
            await asyncio.gather(*self._cleanups, return_exceptions=True)
