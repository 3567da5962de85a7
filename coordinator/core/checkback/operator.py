"""What an operator does by hand: re-arm a discarded message, or resolve one.

Each is one compare-and-set with its history row (source `operator`). Only
a transition into `committed` makes a message deliverable, whoever causes it.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncConnection

from coordinator.core.configs import CheckBackConfig
from coordinator.core.context import CoreContext
from coordinator.db.queries import fetch_one
from coordinator.domain.checkback import OperatorResult
from coordinator.domain.errors import NotFound, StateConflict
from coordinator.domain.states import MessageState, Resolution, Source


def _result(row: dict[str, Any]) -> OperatorResult:
    previous = MessageState(row["previous_state"])
    new = row["new_state"]
    return OperatorResult(
        offset=row["id"],
        message_id=row["message_id"],
        transaction_id=row["transaction_id"],
        previous_state=previous,
        state=MessageState(new) if new else previous,
        changed=new is not None,
    )


async def recheck(
    conn: AsyncConnection[Any], config: CheckBackConfig, offset: int
) -> OperatorResult:
    row = await fetch_one(
        conn,
        "operator_recheck",
        {"offset": offset, "retention_seconds": config.retention_hours * 3600.0},
    )
    if row is None:
        raise NotFound(f"no message with offset {offset}")
    result = _result(row)
    if result.changed:
        return result
    if result.previous_state is not MessageState.DISCARDED:
        raise StateConflict(
            f"message {offset} is {result.previous_state.value}; only a discarded message "
            "can be re-armed for check-backs",
            current_state=result.previous_state.value,
        )
    raise StateConflict(
        f"message {offset} is older than the retention of {config.retention_hours:g} hours; "
        "re-armed it would expire at once: commit or roll it back by hand instead",
        current_state=result.previous_state.value,
    )


async def resolve(
    conn: AsyncConnection[Any], offset: int, resolution: Resolution
) -> OperatorResult:
    target = resolution.target_state
    if target is None:
        raise ValueError("an operator resolves with commit or rollback")
    row = await fetch_one(conn, "operator_resolve", {"offset": offset, "to_state": target.value})
    if row is None:
        raise NotFound(f"no message with offset {offset}")
    result = _result(row)
    if result.changed or result.state is target:
        return result
    raise StateConflict(
        f"message {offset} is already {result.state.value}; it cannot be "
        f"{'committed' if target is MessageState.COMMITTED else 'rolled back'}",
        current_state=result.state.value,
    )


class OperatorActions:
    """An operator's re-arming and resolving, each on one message by its offset."""

    def __init__(self, context: CoreContext, config: CheckBackConfig) -> None:
        self._context = context
        self._config = config

    async def recheck(self, offset: int) -> OperatorResult:
        """Re-arm a discarded message: prepared, check count reset, checked back now."""
        async with self._context.pool.connection() as conn:
            return await recheck(conn, self._config, offset)

    async def resolve(self, offset: int, resolution: Resolution) -> OperatorResult:
        """Commit or roll back a prepared or discarded message by hand (source operator)."""
        async with self._context.pool.connection() as conn:
            result = await resolve(conn, offset, resolution)
        if result.changed:
            self._context.meter.resolved(result.state, Source.OPERATOR, None)
        return result
