"""A consumer group's subscription as this door last wrote it, so an unchanged restatement is free.

A SimpleConsumer restates its subscription with every receive, and a
consumer's Settings on its Telemetry stream state it too: both subscribe
through here, which writes only what changed.
"""

from __future__ import annotations

from coordinator.core import Coordinator
from coordinator.domain.delivery import FilterType


class Subscriber:
    """Subscribes consumer groups through the core's delivery, remembering what it wrote."""

    def __init__(self, core: Coordinator) -> None:
        self._core = core
        # (group, topic) -> filter last written, so that a receive which
        # restates an unchanged subscription costs no database round trip.
        self._subscribed: dict[tuple[str, str], tuple[str, FilterType]] = {}

    async def subscribed(
        self,
        group: str,
        topic: str,
        expression: str,
        filter_type: FilterType = FilterType.TAG,
        fifo: bool | None = None,
    ) -> None:
        """Make sure `group` subscribes to `topic` with this filter (written only on change)."""
        key = (group, topic)
        if fifo is None and self._subscribed.get(key) == (expression, filter_type):
            return
        await self._core.delivery.ensure_subscribed(
            group, topic, expression, filter_type=filter_type, fifo=fifo
        )
        # As the client states it: a SQL92 text is stored trimmed.
        self._subscribed[key] = (expression, filter_type)

    def forget(self, group: str, topic: str) -> None:
        """Write the group's subscription again at its next statement."""
        self._subscribed.pop((group, topic), None)
