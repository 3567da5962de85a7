"""A client's session with the door: its route lookups, heartbeats, Telemetry stream and
termination.

One queue per topic (id 0) on one broker, this server, is every route
(`assignment.py`). A
producer is live while its Telemetry stream is open (`telemetry.py`), which
is what check-backs need; a heartbeat only proves the token.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from coordinator.core.auth import Authenticator
from coordinator.core.configs import GrpcDoorConfig
from coordinator.domain.errors import CoordinatorError
from coordinator.grpc.assignment import requested_endpoints, topic_queue
from coordinator.grpc.calls import answered, caller_of, topic_of
from coordinator.grpc.status import error_status, status
from coordinator.grpc.stubs import Stubs
from coordinator.grpc.telemetry import TelemetryDoor


class Session:
    """QueryRoute, Heartbeat, NotifyClientTermination and Telemetry."""

    def __init__(
        self,
        authenticator: Authenticator,
        config: GrpcDoorConfig,
        stubs: Stubs,
        telemetry: TelemetryDoor,
        *,
        port: int,
    ) -> None:
        self.authenticator = authenticator
        self.config = config
        self.stubs = stubs
        self.telemetry = telemetry
        self.port = port

    @answered("QueryRouteResponse")
    async def QueryRoute(self, request: Any, context: Any) -> Any:
        caller_of(context, self.authenticator)
        topic = topic_of(request.topic)
        endpoints = requested_endpoints(self.stubs, self.config, self.port, request)
        queue = topic_queue(self.stubs, topic, endpoints)
        return self.stubs.service.QueryRouteResponse(
            status=status(self.stubs), message_queues=[queue]
        )

    @answered("HeartbeatResponse")
    async def Heartbeat(self, request: Any, context: Any) -> Any:
        caller_of(context, self.authenticator)
        return self.stubs.service.HeartbeatResponse(status=status(self.stubs))

    @answered("NotifyClientTerminationResponse")
    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:
        caller = caller_of(context, self.authenticator)
        if caller.client_id is not None:
            await self.telemetry.client_left(caller.client_id, caller.principal)
        return self.stubs.service.NotifyClientTerminationResponse(status=status(self.stubs))

    async def Telemetry(self, request_iterator: AsyncIterator[Any], context: Any) -> None:
        try:
            caller = caller_of(context, self.authenticator)
        except CoordinatorError as error:
            command = self.stubs.service.TelemetryCommand(status=error_status(self.stubs, error))
            await context.write(command)
            return
        await self.telemetry.serve(request_iterator, context, caller)
