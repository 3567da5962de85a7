"""The retention job's service: a round keeps the coordinator's tables to size.

A round deletes, in bounded batches each in its own short transaction,
every row older than its retention that no one still needs (rounds.py),
records which consumer groups received, finds the idle ones, and reads the
tables' sizes. Any number of nodes run rounds on one database: SKIP LOCKED
splits the rows between them, so each row is deleted once and a row the
hot path holds is passed over. The scheduler (scheduler.py) runs `run_round`
every retention_interval_seconds; tests call it directly, with a `now` of
their own.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from datetime import datetime

from coordinator.core.context import CoreContext
from coordinator.core.retention import rounds
from coordinator.core.retention.config import RetentionConfig
from coordinator.domain.retention import RetentionResult

log = logging.getLogger(__name__)


# How often a round walks every resolved message past its retention again,
# for those a delivery, a dead letter or a lock held when it last passed.
RESCAN_SECONDS = 60.0
# A round holds one connection for all its batches: longer than a request may,
# and still bounded, so a round on a frozen server ends and the next one finds
# the new primary.
ROUND_DEADLINE_SECONDS = 120.0
# At most one "lost unacked messages" line per group this often.
LOST_LOG_SECONDS = 60.0


def _no_groups() -> list[str]:
    return []


class Retention:
    def __init__(
        self,
        context: CoreContext,
        config: RetentionConfig,
        received_groups: Callable[[], list[str]] = _no_groups,
    ) -> None:
        self._context = context
        self.config = config
        self._received_groups = received_groups  # groups this node saw receive
        self._reported_idle: set[str] = set()
        # Unacked messages dropped since the last line that said so, by group.
        self._lost: collections.Counter[str] = collections.Counter()
        self._lost_logged_at = -LOST_LOG_SECONDS
        # The last round's result (the status page and /metrics read it).
        self.last_result: RetentionResult | None = None
        # Where the next round's walk of resolved messages starts, and when
        # a walk last started from the beginning.
        self._resolved_since: datetime | None = None
        self._walked_all_at: datetime | None = None

    async def run_round(self, now: datetime | None = None) -> RetentionResult:
        """One round; `now` (default: the database's clock) is when it counts ages from."""
        started = time.perf_counter()
        config = self.config
        result = RetentionResult()
        groups = self._received_groups()
        try:
            pool = self._context.pool
            async with pool.connection(deadline=max(pool.deadline, ROUND_DEADLINE_SECONDS)) as conn:
                at = await rounds.clock(conn, now)
                result.started_at = at
                # Lost if this fails (the database is away): a few seconds of
                # receives, against an idle bound of hours.
                await rounds.mark_received(conn, groups, at)
                stopping = self._context.stopping
                for step in (rounds.delete_dead_letters, rounds.delete_unacked):
                    await step(conn, config, at, result, stopping)
                await rounds.idle_groups(conn, config, at, result)
                self._resolved_since = await rounds.delete_resolved(
                    conn, config, at, result, stopping, self._resume_from(at, result)
                )
                result.tables = await rounds.table_figures(conn, now)
        finally:
            # What a failed round deleted before it failed is counted too.
            result.duration_seconds = time.perf_counter() - started
            self.last_result = result
            self._report(result)
        return result

    def _resume_from(self, at: datetime, result: RetentionResult) -> datetime | None:
        """Where this round's walk of resolved messages starts.

        From the beginning now and then, and whenever this round freed
        messages (by dropping their deliveries or dead letters): acks free
        messages too, and a held row passed over waits for such a walk, at
        most RESCAN_SECONDS after its retention.
        """
        freed = result.unacked or result.dead_letters
        last = self._walked_all_at
        if freed or last is None or at < last or (at - last).total_seconds() >= RESCAN_SECONDS:
            self._walked_all_at = at
            return None
        return self._resolved_since

    def _report(self, result: RetentionResult) -> None:
        """Metrics, and log lines for what a person should know."""
        self._context.meter.retention_round(result, self.config.max_metric_label_values)
        self._report_lost(result)
        self._report_idle(result)
        if result.removed_anything:
            removed = result.removed
            log.info(
                "retention round: %(messages)d messages, %(unacked_deliveries)d unacked "
                "deliveries, %(dead_letters)d dead letters, %(consumer_groups)d consumer "
                "groups removed",
                removed,
                extra=removed,
            )

    def _report_lost(self, result: RetentionResult) -> None:
        # A group that stopped consuming loses messages at every round: one
        # line per group a minute, with what it lost since the last one.
        self._lost.update(result.unacked)
        now = time.monotonic()
        if not self._lost or now - self._lost_logged_at < LOST_LOG_SECONDS:
            return
        for group, lost in sorted(self._lost.items()):
            log.warning(
                "retention: consumer group %s lost %d unacked messages older than %g hours",
                group,
                lost,
                self.config.unacked_retention_hours,
                extra={"consumer_group": group, "lost": lost},
            )
        self._lost.clear()
        self._lost_logged_at = now

    def _report_idle(self, result: RetentionResult) -> None:
        # Once per group becoming idle, not every round.
        idle = {group.consumer_group: group for group in result.idle_groups}
        for name in sorted(idle.keys() - self._reported_idle):
            group = idle[name]
            action = "removed" if name in result.removed_groups else "kept"
            log.warning(
                "retention: consumer group %s has not received since %s (%d deliveries "
                "pending): %s",
                name,
                group.last_received_at.isoformat(),
                group.pending,
                action,
                extra={"consumer_group": name, "pending": group.pending},
            )
        self._reported_idle = set(idle) - set(result.removed_groups)
