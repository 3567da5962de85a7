"""The overview: the figures of the status page, `coordinator status` and the
database gauges of /metrics, read cheaply in one snapshot.

Every statement (db/sql/queries/status.sql) reads a bounded index range,
never a whole table of messages, history or deliveries. Resolutions per
minute are the expensive part on a busy coordinator (one row per resolved
message), so a minute is read from the database until it is complete and
then kept in memory: a refresh reads only the last minute or two.

The storage figures are read in the same snapshot (the retention job's own
statements: sizes from the catalog, oldest rows from index heads, idle
groups from subscriptions); the last retention round is this process's
own, kept in memory by the retention service.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection

from coordinator.core.configs import OverviewConfig
from coordinator.core.context import CoreContext
from coordinator.db.pool import CoordinatorPool
from coordinator.db.queries import execute, fetch_all, fetch_one
from coordinator.domain.errors import InvalidMessage
from coordinator.domain.overview import (
    AGE_BOUNDS_SECONDS,
    COUNT_LIMIT,
    DEFAULT_MINUTES,
    MAX_MINUTES,
    OLDEST_LISTED,
    RECENT_CHECK_SECONDS,
    CheckBackGroup,
    ConsumerFigures,
    MinuteCounts,
    OldHalfMessage,
    Overview,
    PendingGroup,
    ProducerGroupCount,
    Storage,
    age_buckets,
)
from coordinator.domain.records import record_from_row
from coordinator.domain.retention import IdleConsumerGroup, RetentionResult, TableFigures
from coordinator.domain.states import CheckStatus, MessageState, Source

MINUTE = timedelta(minutes=1)
# A minute's resolutions are final once every transaction that started in it
# has ended (resolved_at is the resolving transaction's start). Ends, claims
# and operator actions are short transactions; this leaves them ample time.
# Ended, that is, on the server read: a minute is kept once it ended SETTLE
# before the time up to which that server holds every commit (its now() on a
# primary, less its replication lag on a standby: data_complete_until).
SETTLE = timedelta(seconds=15)
# Reading every figure in one snapshot may take longer than a request's
# deadline on large tables; still bounded, for a frozen server.
READ_DEADLINE_SECONDS = 30.0


def _no_round() -> RetentionResult | None:
    return None


class OverviewReader:
    """Reads overviews; keeps the complete minutes' resolutions between reads.

    `reads` is the pool the figures are read from: one on a standby
    (read_database_url) when given, else the context's. Every statement of
    an overview is a plain read, in a REPEATABLE READ, READ ONLY transaction,
    which a hot standby serves.
    """

    def __init__(
        self,
        context: CoreContext,
        config: OverviewConfig,
        last_round: Callable[[], RetentionResult | None] = _no_round,
        *,
        reads: CoordinatorPool | None = None,
    ) -> None:
        self._context = context
        self._pool = reads if reads is not None else context.pool
        self._config = config
        self._last_round = last_round  # this process's last retention round, if any
        self._complete_minutes: dict[datetime, MinuteCounts] = {}

    async def read(self, minutes: int = DEFAULT_MINUTES, *, storage: bool = True) -> Overview:
        """The overview now, with resolutions per minute over the last `minutes` minutes
        (none for 0: /metrics' gauges need none), and the storage figures unless `storage`
        is false (/metrics has them from the retention rounds)."""
        if not 0 <= minutes <= MAX_MINUTES:
            raise InvalidMessage(f"minutes must be between 0 and {MAX_MINUTES}, got {minutes}")
        pool = self._pool
        deadline = max(pool.deadline, READ_DEADLINE_SECONDS)
        async with pool.connection(deadline=deadline) as conn:
            # Asked before the snapshot is taken, so the snapshot holds at least
            # every commit up to this moment (a standby replays on meanwhile).
            complete = await fetch_one(conn, "data_complete_until")
            assert complete is not None
            async with conn.transaction():
                await execute(conn, "overview_snapshot")
                clock = await fetch_one(conn, "overview_clock")
                assert clock is not None
                now: datetime = clock["now"]
                pending_rows = await fetch_all(
                    conn, "pending_by_age", {"bounds": list(AGE_BOUNDS_SECONDS)}
                )
                oldest = await fetch_all(conn, "oldest_half_messages", {"limit": OLDEST_LISTED})
                per_minute = await self._minutes(conn, now, complete["complete_until"], minutes)
                checks = await fetch_all(
                    conn, "check_requests_by_group", {"recent_seconds": RECENT_CHECK_SECONDS}
                )
                producers = await fetch_all(
                    conn,
                    "producer_counts",
                    {"producer_ttl_seconds": self._config.producer_ttl_seconds},
                )
                consumers = await fetch_all(conn, "consumer_figures", {"limit": COUNT_LIMIT})
                stored = await self._storage(conn, now) if storage else None
        groups = _pending_groups(pending_rows, now)
        by_bucket: dict[int, int] = defaultdict(int)
        for row in pending_rows:
            by_bucket[row["bucket"]] += row["messages"]
        producer_counts = tuple(record_from_row(ProducerGroupCount, row) for row in producers)
        return Overview(
            at=now,
            pending=sum(by_bucket.values()),
            age_buckets=age_buckets(by_bucket),
            pending_groups=groups,
            oldest=tuple(_old_half_message(row) for row in oldest),
            minutes=per_minute,
            check_backs=_check_backs(groups, checks, producer_counts),
            producers=producer_counts,
            consumers=tuple(record_from_row(ConsumerFigures, row) for row in consumers),
            storage=stored,
        )

    async def _storage(self, conn: AsyncConnection[Any], now: datetime) -> Storage:
        tables = await fetch_all(conn, "retention_table_figures", {"now": now})
        cutoff = now - timedelta(hours=self._config.idle_consumer_group_hours)
        idle = await fetch_all(conn, "retention_idle_consumer_groups", {"cutoff": cutoff})
        return Storage(
            tables=tuple(
                TableFigures(
                    row["name"], int(row["bytes"]), int(row["rows"]), row["oldest_age_seconds"]
                )
                for row in tables
            ),
            idle_consumer_groups=tuple(
                IdleConsumerGroup(
                    row["consumer_group"], row["last_received_at"], int(row["pending"])
                )
                for row in idle
            ),
            retention_enabled=self._config.retention_enabled,
            last_round=self._last_round(),
        )

    async def _minutes(
        self, conn: AsyncConnection[Any], now: datetime, complete_until: datetime, minutes: int
    ) -> tuple[MinuteCounts, ...]:
        if minutes == 0:
            return ()
        current = now.replace(second=0, microsecond=0)
        first = current - (minutes - 1) * MINUTE
        window = [first + i * MINUTE for i in range(minutes)]
        missing = [m for m in window if m not in self._complete_minutes]
        read: dict[datetime, MinuteCounts] = {}
        if missing:
            rows = await fetch_all(conn, "resolutions_per_minute", {"since": missing[0]})
            read = _minute_counts(rows, missing)
        for minute, counts in read.items():
            # Not `now`: a standby's clock runs on while it has not replayed
            # the last commits, and a minute kept short would stay short.
            if minute + MINUTE + SETTLE <= complete_until:
                self._complete_minutes[minute] = counts
        # Keep no more than the longest window can show.
        for minute in [m for m in self._complete_minutes if m < current - MAX_MINUTES * MINUTE]:
            del self._complete_minutes[minute]
        return tuple(self._complete_minutes.get(m) or read[m] for m in window)


def _minute_counts(rows: list[Any], minutes: list[datetime]) -> dict[datetime, MinuteCounts]:
    """MinuteCounts for each of `minutes` (empty ones too) from resolutions_per_minute rows."""
    counts: dict[datetime, dict[str, int]] = {m: defaultdict(int) for m in minutes}
    for row in rows:
        into = counts.get(row["minute"])
        if into is None:  # a minute already complete in memory
            continue
        into[MessageState(row["state"]).value] += row["messages"]
        if row["source"] == Source.CHECK.value:
            into["by_check"] += row["messages"]
    return {
        minute: MinuteCounts(
            minute=minute,
            committed=c[MessageState.COMMITTED.value],
            rolled_back=c[MessageState.ROLLED_BACK.value],
            discarded=c[MessageState.DISCARDED.value],
            expired=c[MessageState.EXPIRED.value],
            by_check=c["by_check"],
        )
        for minute, c in counts.items()
    }


def _pending_groups(rows: list[Any], now: datetime) -> tuple[PendingGroup, ...]:
    totals: dict[tuple[str, str], list[Any]] = {}
    for row in rows:
        key = (row["producer_group"], row["topic"])
        pending, due, oldest = totals.get(key, [0, 0, row["oldest_born_at"]])
        totals[key] = [
            pending + row["messages"],
            due + row["due"],
            min(oldest, row["oldest_born_at"]),
        ]
    return tuple(
        PendingGroup(group, topic, pending, due, now - oldest)
        for (group, topic), (pending, due, oldest) in sorted(totals.items())
    )


def _old_half_message(row: Any) -> OldHalfMessage:
    status = row["check_status"]
    return record_from_row(
        OldHalfMessage,
        row,
        offset=row["message_offset"],
        check_status=CheckStatus(status) if status else None,
    )


def _check_backs(
    pending: tuple[PendingGroup, ...],
    checks: list[Any],
    producers: tuple[ProducerGroupCount, ...],
) -> tuple[CheckBackGroup, ...]:
    """Per producer group with pending half messages or check requests."""
    waiting: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for group in pending:
        waiting[group.producer_group][0] += group.pending
        waiting[group.producer_group][1] += group.due
    by_group = {row["producer_group"]: row for row in checks}
    live = {p.producer_group: p.live for p in producers}
    result = []
    for name in sorted(waiting.keys() | by_group.keys()):
        row = by_group.get(name)
        result.append(
            CheckBackGroup(
                producer_group=name,
                pending=waiting[name][0],
                due=waiting[name][1],
                open=row["open"] if row else 0,
                delivered=row["delivered"] if row else 0,
                failed=row["failed"] if row else 0,
                no_producer=row["no_producer"] if row else 0,
                checked_recently=row["checked_recently"] if row else 0,
                last_failure=row["last_failure"] if row else None,
                live_producers=live.get(name, 0),
            )
        )
    return tuple(result)
