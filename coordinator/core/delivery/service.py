"""The delivery service: one face for subscriptions, receiving and dead letters."""

from __future__ import annotations

from coordinator.core.configs import DeliveryConfig
from coordinator.core.context import CoreContext
from coordinator.core.delivery.dead_letters import DeadLetters
from coordinator.core.delivery.receiving import Receiving
from coordinator.core.delivery.subscriptions import Subscriptions


class Delivery:
    """Subscriptions, receive, ack, invisible durations, dead letters and lag."""

    def __init__(self, context: CoreContext, config: DeliveryConfig) -> None:
        subscriptions = Subscriptions(context, config)
        self._receiving = receiving = Receiving(context, config)
        dead_letters = DeadLetters(context)
        # The parts' methods, under the names callers know.
        self.subscribe = subscriptions.subscribe
        self.ensure_subscribed = subscriptions.ensure_subscribed
        self.unsubscribe = subscriptions.unsubscribe
        self.subscriptions = subscriptions.subscriptions
        self.lag = subscriptions.lag
        self.receive = receiving.receive
        self.ack = receiving.ack
        self.ack_batch = receiving.ack_batch
        self.change_invisible_duration = receiving.change_invisible_duration
        self.dead_letter = receiving.dead_letter
        self.dead_letters = dead_letters.dead_letters
        self.requeue_dead_letter = dead_letters.requeue_dead_letter
        self.requeue_dead_letters = dead_letters.requeue_dead_letters

    def take_received_groups(self) -> list[str]:
        """The consumer groups that received since the previous call (the retention job's)."""
        groups = sorted(self._receiving.received_groups)
        self._receiving.received_groups.clear()
        return groups

    @property
    def poll_interval_seconds(self) -> float:
        """How often a waiting receive looks again without being notified."""
        return self._receiving.poll_interval_seconds

    @poll_interval_seconds.setter
    def poll_interval_seconds(self, seconds: float) -> None:
        self._receiving.poll_interval_seconds = seconds
