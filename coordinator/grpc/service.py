"""`apache.rocketmq.v2.MessagingService`, assembled from the modules that each answer a part.

The mapping onto the coordinator's model:
- producer group: RocketMQ 5 has none; a transactional message's topic
  stands for it, as in RocketMQ's proxy (`convert.producer_group_of`). Its
  check-backs go to the producers whose Telemetry stream announced the
  topic (`telemetry.py`).
- consumer group: a SimpleConsumer's group and subscription are a
  subscription like one made over HTTP (`consuming.py`).
- one queue per topic (id 0) on one broker: this server, in every route and
  every PushConsumer's assignment (`assignment.py`).

The parts: `producing.py` (SendMessage, EndTransaction), `consuming.py`
(ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue), `assignment.py` (QueryAssignment),
`session.py` (QueryRoute, Heartbeat, NotifyClientTermination, Telemetry)
and `unsupported.py` (the rest). What they share, authentication and
answering with a status, is `calls.py`.
"""

from __future__ import annotations

from coordinator.core import Coordinator
from coordinator.core.auth import Authenticator
from coordinator.core.configs import GrpcDoorConfig
from coordinator.grpc.assignment import Assignments
from coordinator.grpc.consuming import Consuming
from coordinator.grpc.producing import Producing
from coordinator.grpc.session import Session
from coordinator.grpc.stubs import Stubs
from coordinator.grpc.telemetry import TelemetryDoor
from coordinator.grpc.unsupported import pull_message_handler, unsupported_handlers


class MessagingService:
    """The servicer grpc.aio calls: every RPC of the service, as an attribute by its name.

    (The generated base class is not needed for that; `server.handlers`
    looks each RPC up by name.)
    """

    def __init__(
        self,
        core: Coordinator,
        authenticator: Authenticator,
        settings: GrpcDoorConfig,
        stubs: Stubs,
        *,
        port: int,
    ) -> None:
        self.stubs = stubs
        self.telemetry = TelemetryDoor(core, authenticator, settings, stubs)
        producing = Producing(core, authenticator, settings, stubs)
        consuming = Consuming(core, authenticator, settings, stubs)
        session = Session(authenticator, settings, stubs, self.telemetry, port=port)
        # A consumer's Settings on its Telemetry stream subscribe it as a receive does.
        self.telemetry.on_subscription = consuming.subscribed
        # A PushConsumer's nack waits for its group's backoff.
        consuming.is_push_consumer = self.telemetry.is_push_consumer
        assignments = Assignments(authenticator, settings, stubs, port=port)

        self.SendMessage = producing.SendMessage
        self.EndTransaction = producing.EndTransaction
        self.RecallMessage = producing.RecallMessage

        self.ReceiveMessage = consuming.ReceiveMessage
        self.AckMessage = consuming.AckMessage
        self.ChangeInvisibleDuration = consuming.ChangeInvisibleDuration
        self.ForwardMessageToDeadLetterQueue = consuming.ForwardMessageToDeadLetterQueue

        self.QueryAssignment = assignments.QueryAssignment
        self.QueryRoute = session.QueryRoute
        self.Heartbeat = session.Heartbeat
        self.NotifyClientTermination = session.NotifyClientTermination
        self.Telemetry = session.Telemetry

        self.PullMessage = pull_message_handler(stubs, authenticator)
        for name, handler in unsupported_handlers(stubs, authenticator).items():
            setattr(self, name, handler)

    def begin_close(self) -> None:
        """The server stops: Telemetry streams end (receives end with the core's stopping)."""
        self.telemetry.begin_close()

    async def close(self) -> None:
        await self.telemetry.close()
