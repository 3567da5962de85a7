"""`apache.rocketmq.v2.MessagingService`: one class whose methods are the RPCs, from the parts.

The mapping onto the coordinator's model:
- producer group: RocketMQ 5 has none; a transactional message's topic
  stands for it, as in RocketMQ's proxy (`convert.producer_group_of`). Its
  check-backs go to the producers whose Telemetry stream announced the
  topic (`telemetry.py`).
- consumer group: a SimpleConsumer's group and subscription are a
  subscription like one made over HTTP (`consuming.py`).
- one queue per topic (id 0) on one broker: this server, in every route and
  every PushConsumer's assignment (`assignment.py`).

The parts: `producing.py` (SendMessage, EndTransaction, RecallMessage),
`consuming.py` (ReceiveMessage, AckMessage, ChangeInvisibleDuration,
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
from coordinator.grpc.subscriber import Subscriber
from coordinator.grpc.telemetry import TelemetryDoor
from coordinator.grpc.unsupported import Unsupported


class MessagingService(Producing, Consuming, Assignments, Session, Unsupported):
    """The servicer grpc.aio calls: every RPC of the service is a method, inherited from its part.

    (The generated base class is not needed for that; `server.handlers`
    looks each RPC up by name.) The parts share only their dependencies
    (the core, the authenticator, the door's config, the stubs, the port); a unit
    test keeps their other names apart.
    """

    def __init__(
        self,
        core: Coordinator,
        authenticator: Authenticator,
        config: GrpcDoorConfig,
        stubs: Stubs,
        *,
        port: int,
    ) -> None:
        # A consumer's Settings on its Telemetry stream subscribe it as a receive does.
        subscriber = Subscriber(core)
        telemetry = TelemetryDoor(
            core, authenticator, config, stubs, on_subscription=subscriber.subscribed
        )
        Producing.__init__(self, core, authenticator, config, stubs)
        # A PushConsumer's nack waits for its group's backoff: its stream tells.
        Consuming.__init__(
            self,
            core,
            authenticator,
            config,
            stubs,
            subscriber=subscriber,
            is_push_consumer=telemetry.is_push_consumer,
        )
        Assignments.__init__(self, authenticator, config, stubs, port=port)
        Session.__init__(self, authenticator, config, stubs, telemetry, port=port)
        Unsupported.__init__(self, authenticator, stubs)

    def begin_close(self) -> None:
        """The server stops: Telemetry streams end (receives end with the core's stopping)."""
        self.telemetry.begin_close()

    async def close(self) -> None:
        await self.telemetry.close()
