"""The delivery service: one class over subscriptions, receiving and dead letters."""

from __future__ import annotations

from coordinator.core.configs import DeliveryConfig
from coordinator.core.context import CoreContext
from coordinator.core.delivery.dead_letters import DeadLetters
from coordinator.core.delivery.receiving import Receiving
from coordinator.core.delivery.subscriptions import Subscriptions


class Delivery(Subscriptions, Receiving, DeadLetters):
    """Subscriptions, receive, ack, invisible durations, dead letters and lag.

    Each part's methods are its own, inherited here under the names callers
    know; the parts share the context and nothing else (a unit test keeps
    their names apart), so each still works alone.
    """

    def __init__(self, context: CoreContext, config: DeliveryConfig) -> None:
        Subscriptions.__init__(self, context, config)
        Receiving.__init__(self, context, config)
        DeadLetters.__init__(self, context)
