"""Small builders shared by the tests."""

from __future__ import annotations

from typing import Any

from coordinator.domain.messages import EndRequest, NewMessage
from coordinator.domain.states import Resolution

GROUP = "order-producers"
TOPIC = "orders"


def half(body: bytes = b"order 1001 created", **overrides: Any) -> NewMessage:
    values: dict[str, Any] = {"topic": TOPIC, "body": body, "producer_group": GROUP}
    values.update(overrides)
    return NewMessage(**values)


def end(
    transaction_id: str,
    resolution: Resolution | str,
    *,
    group: str = GROUP,
    from_check: bool = False,
    message_id: str | None = None,
) -> EndRequest:
    return EndRequest(
        transaction_id=transaction_id,
        producer_group=group,
        resolution=Resolution(resolution),
        from_check=from_check,
        message_id=message_id,
    )
