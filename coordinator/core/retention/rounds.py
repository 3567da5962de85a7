"""One retention round: each kind of row, batch by batch, each batch its own transaction.

The order matters: dead letters and unacked deliveries go first, so that a
message they held becomes a resolved message with nothing left to deliver,
which the last step deletes in the same round. A batch is one statement on
an autocommit connection: its row locks last for that statement only.
"""

from __future__ import annotations

import asyncio
import collections
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection

from coordinator.core.retention.config import RetentionConfig
from coordinator.db.queries import execute, fetch_all, fetch_one
from coordinator.domain.retention import IdleConsumerGroup, RetentionResult, TableFigures

# A round drains a backlog batch by batch, but not forever: the next round
# (every retention_interval_seconds) goes on.
MAX_BATCHES_PER_KIND = 100


def _hours(hours: float) -> timedelta:
    return timedelta(hours=hours)


async def clock(conn: AsyncConnection[Any], now: datetime | None) -> datetime:
    row = await fetch_one(conn, "retention_clock", {"now": now})
    assert row is not None
    database_now: datetime = row["now"]
    return database_now


async def _drain(
    conn: AsyncConnection[Any],
    name: str,
    params: dict[str, object],
    batch_size: int,
    column: str,
    stopping: asyncio.Event | None = None,
) -> collections.Counter[str]:
    """Run a delete batch by batch until one comes back short; count its rows by `column`."""
    removed: collections.Counter[str] = collections.Counter()
    for _ in range(MAX_BATCHES_PER_KIND):
        rows = await fetch_all(conn, name, {**params, "batch_size": batch_size})
        removed.update(row[column] for row in rows)
        if len(rows) < batch_size:
            break
        if stopping is not None and stopping.is_set():
            break  # the node stops: the rest waits for the next round, on any node
    return removed


async def delete_dead_letters(
    conn: AsyncConnection[Any],
    config: RetentionConfig,
    now: datetime,
    result: RetentionResult,
    stopping: asyncio.Event | None = None,
) -> None:
    cutoff = now - _hours(config.dead_letter_retention_hours)
    removed = await _drain(
        conn,
        "retention_delete_dead_letters",
        {"cutoff": cutoff},
        config.retention_batch_size,
        "consumer_group",
        stopping,
    )
    result.dead_letters.update(removed)


async def delete_unacked(
    conn: AsyncConnection[Any],
    config: RetentionConfig,
    now: datetime,
    result: RetentionResult,
    stopping: asyncio.Event | None = None,
) -> None:
    cutoff = now - _hours(config.unacked_retention_hours)
    removed = await _drain(
        conn,
        "retention_delete_unacked_deliveries",
        {"cutoff": cutoff},
        config.retention_batch_size,
        "consumer_group",
        stopping,
    )
    result.unacked.update(removed)


async def delete_resolved(
    conn: AsyncConnection[Any],
    config: RetentionConfig,
    now: datetime,
    result: RetentionResult,
    stopping: asyncio.Event | None = None,
    since: datetime | None = None,
) -> datetime | None:
    """Delete resolved messages past their retention, resolved at `since` or later.

    Returns where the next round may start: every message resolved before it
    was deleted or found held (by a delivery, a dead letter or a lock). A
    held one frees up later, so the caller starts again from the beginning
    now and then; meanwhile a round does not walk the same held rows again.
    """
    if config.archive_first:
        return None  # messages leave through `pipeline archive`, which verifies its copy first
    # Counted from the resolution, which is never before the birth: a
    # message past both bounds is also past the duplicate window from its
    # birth, so no message within reach is held back by the window alone.
    cutoff = now - _hours(max(config.resolved_retention, config.duplicate_window))
    params: dict[str, object] = {
        "cutoff": cutoff,
        "born_before": now - _hours(config.duplicate_window),
        "batch_size": config.retention_batch_size,
    }
    removed: collections.Counter[str] = collections.Counter()
    try:
        for _ in range(MAX_BATCHES_PER_KIND):
            rows = await fetch_all(
                conn, "retention_delete_resolved_messages", {**params, "since": since}
            )
            removed.update(row["state"] for row in rows)
            if len(rows) < config.retention_batch_size:
                return cutoff  # walked up to the cutoff
            # Full: everything resolved before its newest row was deleted or held.
            since = max(row["resolved_at"] for row in rows)
            if stopping is not None and stopping.is_set():
                break
        return since
    finally:
        result.messages.update(removed)


async def mark_received(conn: AsyncConnection[Any], groups: list[str], now: datetime) -> None:
    """Record the groups this node saw receive since its previous round."""
    if groups:
        await execute(conn, "retention_mark_received", {"groups": groups, "at": now})


async def idle_groups(
    conn: AsyncConnection[Any], config: RetentionConfig, now: datetime, result: RetentionResult
) -> None:
    """Find the idle consumer groups; remove them when configured to."""
    cutoff = now - _hours(config.idle_consumer_group_hours)
    rows = await fetch_all(conn, "retention_idle_consumer_groups", {"cutoff": cutoff})
    result.idle_groups = [
        IdleConsumerGroup(row["consumer_group"], row["last_received_at"], int(row["pending"]))
        for row in rows
    ]
    if not config.remove_idle_consumer_groups:
        return
    names = [idle.consumer_group for idle in result.idle_groups]
    # One statement per batch of groups; their deliveries go with their
    # subscriptions, in the same statement.
    for first in range(0, len(names), config.retention_batch_size):
        batch = names[first : first + config.retention_batch_size]
        removed = await fetch_all(
            conn, "retention_remove_consumer_groups", {"consumer_groups": batch, "cutoff": cutoff}
        )
        gone = {row["consumer_group"] for row in removed}
        result.removed_groups.extend(name for name in batch if name in gone)


async def table_figures(conn: AsyncConnection[Any], now: datetime | None) -> list[TableFigures]:
    rows = await fetch_all(conn, "retention_table_figures", {"now": now})
    return [
        TableFigures(row["name"], int(row["bytes"]), int(row["rows"]), row["oldest_age_seconds"])
        for row in rows
    ]
