"""The storage part of `coordinator status`: each table the retention job keeps to
size, the idle consumer groups, and the last retention round.

The command is no node: it runs no retention round, so it says where the
rounds' figures are rather than print an empty one.
"""

from __future__ import annotations

from datetime import datetime

from rich.console import RenderableType
from rich.text import Text

from coordinator.cli.formats import age, size
from coordinator.cli.tables import Column, fitted
from coordinator.domain.overview import Storage
from coordinator.domain.retention import RetentionResult

NO_ROUND = (
    "Last retention round: none in this process (rounds run in `coordinator serve`; "
    "its status page, GET /v1/overview and /metrics show its last one)."
)


def storage_parts(storage: Storage, at: datetime, width: int) -> list[RenderableType]:
    parts: list[RenderableType] = [
        fitted(
            "Storage",
            [
                Column("table", whole=True),
                Column("size", right=True),
                Column("rows (estimate)", right=True),
                Column("oldest row", right=True),
            ],
            [
                [
                    t.table,
                    size(t.bytes),
                    f"{t.rows:,}",
                    "empty" if t.oldest_age_seconds is None else age(t.oldest_age_seconds),
                ]
                for t in storage.tables
            ],
            width,
        ),
        Text(_round_line(storage.last_round)),
    ]
    if storage.idle_consumer_groups:
        parts.append(
            fitted(
                "Idle consumer groups",
                [
                    Column("consumer group", whole=True),
                    Column("last received", right=True),
                    Column("deliveries pending", right=True),
                ],
                [
                    [g.consumer_group, f"{age(at - g.last_received_at)} ago", f"{g.pending:,}"]
                    for g in storage.idle_consumer_groups
                ],
                width,
            )
        )
    else:
        parts.append(Text("No idle consumer group."))
    return parts


def _round_line(last: RetentionResult | None) -> str:
    if last is None:
        return NO_ROUND
    removed = last.removed
    when = f"{last.started_at.astimezone():%H:%M:%S}" if last.started_at else "(failed)"
    return (
        f"Last retention round: {when}, took {last.duration_seconds:.3f} s; removed "
        f"{removed['messages']:,} messages, {removed['unacked_deliveries']:,} unacked "
        f"deliveries, {removed['dead_letters']:,} dead letters, "
        f"{removed['consumer_groups']:,} consumer groups."
    )
