"""Prometheus metrics, served at /metrics: the meter and every metric it holds.

A `Meter` owns a registry and the metrics declared on it; the core carries
one in its context (`CoreContext.meter`) and the doors count their requests
with it, so nothing here is module-level state: two cores in one process (a
test's) count apart, and each serving process (a `--workers` worker is one)
scrapes its own.

Counters count what this process did (sum them over coordinator nodes).
Gauges of database state (pending half messages and the age of the oldest,
live producers, consumer lag, in flight, dead letters) are read from
PostgreSQL at scrape time (the overview, core/overview.py), so every node
reports the same cluster-wide figure (take the max, not the sum).

Group and topic names come from clients, so the series they label are
bounded: at most max_metric_label_values per metric, the largest on their
own and the rest summed into one series labelled `_other` (its ages the
oldest of them), so a client making groups by the thousand cannot make a
scrape, or Prometheus, grow with it.

Long on purpose: every metric is declared here, so the names and help texts
a scrape shows read as one list, and each fact has its one method.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from coordinator.domain.long_polls import LONGEST_POLL_SECONDS
from coordinator.domain.overview import COUNT_LIMIT, ConsumerFigures, Overview, PendingGroup
from coordinator.domain.retention import RetentionResult
from coordinator.domain.states import DispatchMode, MessageState, Resolution, Source

# A `_created` series beside every counter and histogram doubles what a
# scrape carries and what Prometheus stores, for a start time nobody reads.
disable_created_metrics()

# From a client's commit a few milliseconds after its prepare to an expiry
# after the retention (72 hours by default).
RESOLUTION_LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800,
    3600, 4 * 3600, 24 * 3600, 72 * 3600,
)  # fmt: skip
# Long polls (receives, check-back polls) wait up to LONGEST_POLL_SECONDS and
# answer a little after it: the top buckets sit above it, so the longest poll
# lands in a finite bucket and not in +Inf.
REQUEST_SECONDS_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30,
    LONGEST_POLL_SECONDS, LONGEST_POLL_SECONDS + 30,
)  # fmt: skip

# How a database check-back ended (coordinator_check_backs_database's outcome).
DATABASE_OUTCOMES = ("committed", "rolled_back", "failed")
RETENTION_KINDS = ("messages", "unacked_deliveries", "dead_letters", "consumer_groups")
# The (state, source) pairs a half message can leave `prepared` by.
RESOLUTIONS: dict[MessageState, tuple[Source, ...]] = {
    MessageState.COMMITTED: (Source.CLIENT, Source.CHECK, Source.OPERATOR),
    MessageState.ROLLED_BACK: (Source.CLIENT, Source.CHECK, Source.OPERATOR),
    MessageState.DISCARDED: (Source.DISCARD,),
    MessageState.EXPIRED: (Source.EXPIRY,),
}

# Series by group (and topic) per metric: see the module's docstring.
OTHER = "_other"
DEFAULT_MAX_LABEL_VALUES = 1000  # max_metric_label_values' default

Row = TypeVar("Row")


def process_registry() -> CollectorRegistry:
    """A registry with the Prometheus client's process, platform and garbage-collector
    metrics: what a serving node's /metrics shows beside its own."""
    registry = CollectorRegistry()
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    return registry


class RequestMeter:
    """Counts and times requests of a door (HTTP or gRPC) by their labels.

    The children of each label set are looked up once and kept: `labels()`
    takes a lock and checks its arguments on every call, which the hot
    routes would pay on every request. The labels are bounded (methods,
    route templates, statuses, RPCs, codes), so the cache is too.
    """

    def __init__(self, count: Counter, duration: Histogram) -> None:
        self._count = count
        self._duration = duration
        self._children: dict[tuple[object, ...], tuple[Counter, Histogram | None]] = {}

    def observe(self, labels: tuple[object, ...], timed: int, seconds: float | None) -> None:
        """Count one request with `labels`; time it (when `seconds` is given) by the first
        `timed` labels."""
        children = self._children.get(labels)
        if children is None:
            children = self._children[labels] = (
                self._count.labels(*labels),
                self._duration.labels(*labels[:timed]) if timed else None,
            )
        children[0].inc()
        if seconds is not None and children[1] is not None:
            children[1].observe(seconds)


class Meter:
    """The metrics of one process's core and doors, on a registry of their own.

    Each fact has one method, called where the fact is decided; `exposition()`
    is what /metrics serves. Without a registry the meter makes an empty one.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry = registry if registry is not None else CollectorRegistry()
        self._declare_database_gauges(registry)
        self._declare_check_backs(registry)
        self._declare_retention(registry)
        self._transactions_resolved = Counter(
            "coordinator_transactions_resolved",
            "Half messages leaving `prepared`, by new state (committed, rolled_back, discarded, "
            "expired) and source (client, check, operator, discard, expiry).",
            ["state", "source"],
            registry=registry,
        )
        self._resolution_latency = Histogram(
            "coordinator_resolution_latency_seconds",
            "Time from a half message's prepare (born_at) to its resolution, by new state and "
            "source.",
            ["state", "source"],
            buckets=RESOLUTION_LATENCY_BUCKETS,
            registry=registry,
        )
        self._redeliveries = Counter(
            "coordinator_redeliveries",
            "Deliveries handed out again (delivery attempt above 1), by consumer group.",
            ["consumer_group"],
            registry=registry,
        )
        self._declare_requests(registry)
        self._declare_pool(registry)
        # Counted for every end of both doors: each label set's children are looked
        # up once (see RequestMeter).
        self._resolved_children = {
            (state, source): (
                self._transactions_resolved.labels(state=state.value, source=source.value),
                self._resolution_latency.labels(state=state.value, source=source.value),
            )
            for state, sources in RESOLUTIONS.items()
            for source in sources
        }
        # The consumer groups with a series of their own, per counter by group.
        self._redelivery_groups: set[str] = set()
        self._unacked_groups: set[str] = set()
        self._start_at_zero()

    # --- declarations ---------------------------------------------------------
    def _declare_database_gauges(self, registry: CollectorRegistry) -> None:
        self._half_messages_outstanding = Gauge(
            "coordinator_half_messages_outstanding",
            "Half messages still prepared (neither committed, rolled back, discarded nor expired).",
            ["producer_group", "topic"],
            registry=registry,
        )
        self._producer_instances = Gauge(
            "coordinator_producer_instances",
            "Registered producer instances, and how many of them are live.",
            ["producer_group", "live"],
            registry=registry,
        )
        self._half_messages_oldest_age = Gauge(
            "coordinator_half_messages_oldest_age_seconds",
            "Age of the oldest half message still prepared.",
            ["producer_group", "topic"],
            registry=registry,
        )
        self._consumer_lag = Gauge(
            "coordinator_consumer_lag",
            "Committed messages a consumer group has not acked yet (ready and in flight); "
            f"counted up to {COUNT_LIMIT:,} per consumer group.",
            ["consumer_group", "topic"],
            registry=registry,
        )
        self._consumer_in_flight = Gauge(
            "coordinator_consumer_in_flight",
            "Messages a consumer group received and has not acked, still invisible to the others.",
            ["consumer_group", "topic"],
            registry=registry,
        )
        self._dead_letters = Gauge(
            "coordinator_dead_letters",
            "Dead-lettered deliveries of a consumer group (out of delivery attempts), until "
            "requeued.",
            ["consumer_group", "topic"],
            registry=registry,
        )

    def _declare_check_backs(self, registry: CollectorRegistry) -> None:
        self._check_backs_dispatched = Counter(
            "coordinator_check_backs_dispatched",
            "Check requests handed to producer instances, by how (pull or push).",
            ["via"],
            registry=registry,
        )
        self._check_backs_database = Counter(
            "coordinator_check_backs_database",
            "Check-backs answered by producer groups' own databases (check sources), by "
            "outcome: committed, rolled_back, or failed (the message waits for its next check).",
            ["outcome"],
            registry=registry,
        )
        self._check_backs_claimed = Counter(
            "coordinator_check_backs_claimed",
            "Due half messages whose check this process's check-back rounds claimed and "
            "addressed to a live producer instance (with several nodes or workers, each counts "
            "its own).",
            registry=registry,
        )
        self._check_back_push_failures = Counter(
            "coordinator_check_back_push_failures",
            "Pushed check requests that got no 2xx answer (the message waits for its next check).",
            registry=registry,
        )
        self._check_backs_without_producer = Counter(
            "coordinator_check_backs_without_producer",
            "Due check-backs of groups with no live instance (not counted against the budget).",
            registry=registry,
        )
        self._check_round_seconds = Histogram(
            "coordinator_check_round_seconds",
            "Duration of one check-back round (claims and pushes) on this node.",
            registry=registry,
        )
        self._check_backs_answered = Counter(
            "coordinator_check_backs_answered",
            "Producers' answers to check-backs (pulled or pushed), by resolution (commit, "
            "rollback, unknown).",
            ["resolution"],
            registry=registry,
        )

    def _declare_retention(self, registry: CollectorRegistry) -> None:
        self._retention_removed = Counter(
            "coordinator_retention_removed",
            "Rows this process's retention rounds removed, by kind: messages (with their "
            "history), unacked_deliveries, dead_letters, consumer_groups.",
            ["kind"],
            registry=registry,
        )
        self._retention_unacked_dropped = Counter(
            "coordinator_retention_unacked_dropped",
            "Deliveries a consumer group never acked, dropped at unacked_retention_hours, by "
            "group.",
            ["consumer_group"],
            registry=registry,
        )
        self._retention_last_round = Gauge(
            "coordinator_retention_last_round",
            "This process's last retention round: when it started (unix seconds) and how long "
            "it took.",
            ["figure"],
            registry=registry,
        )
        self._table_figures = Gauge(
            "coordinator_table",
            "Tables the retention job keeps to size, as its last round read them: bytes on "
            "disk, estimated rows and the age of the oldest row in seconds.",
            ["table", "figure"],
            registry=registry,
        )
        self._idle_consumer_groups = Gauge(
            "coordinator_idle_consumer_groups",
            "Consumer groups that have not received for idle_consumer_group_hours.",
            registry=registry,
        )

    def _declare_requests(self, registry: CollectorRegistry) -> None:
        # The doors count their requests through these (HTTP by method, route
        # template and status; gRPC by RPC and RocketMQ code).
        self.http = RequestMeter(
            Counter(
                "coordinator_http_requests",
                "HTTP requests answered, by method, route template (never the raw path) and "
                "status.",
                ["method", "route", "status"],
                registry=registry,
            ),
            Histogram(
                "coordinator_http_request_duration_seconds",
                "Time to answer an HTTP request, by method and route template.",
                ["method", "route"],
                buckets=REQUEST_SECONDS_BUCKETS,
                registry=registry,
            ),
        )
        self.grpc = RequestMeter(
            Counter(
                "coordinator_grpc_requests",
                "RocketMQ gRPC calls answered, by RPC and the RocketMQ status code of the answer.",
                ["rpc", "code"],
                registry=registry,
            ),
            Histogram(
                "coordinator_grpc_request_duration_seconds",
                "Time to answer a RocketMQ gRPC call (a Telemetry stream is not timed: it "
                "lasts), by RPC.",
                ["rpc"],
                buckets=REQUEST_SECONDS_BUCKETS,
                registry=registry,
            ),
        )

    def _declare_pool(self, registry: CollectorRegistry) -> None:
        self._db_pool_connections = Gauge(
            "coordinator_db_pool_connections",
            "Connections of this process's database pool, in use or idle.",
            ["state"],
            registry=registry,
        )
        self._db_pool_waiting = Gauge(
            "coordinator_db_pool_waiting",
            "Requests of this process waiting for a connection of the pool.",
            registry=registry,
        )

    def _start_at_zero(self) -> None:
        # The counters' known label sets exist from the start, at 0. A series that
        # first appears at 1 has no increase to Prometheus (rate() and increase()
        # need two samples), so the first discard after a start would slip past the
        # alert rules. (The resolutions' children are made in __init__.)
        for via in DispatchMode:
            self._check_backs_dispatched.labels(via=via.value)
        for outcome in DATABASE_OUTCOMES:
            self._check_backs_database.labels(outcome=outcome)
        for resolution in Resolution:
            self._check_backs_answered.labels(resolution=resolution.value)
        for kind in RETENTION_KINDS:
            self._retention_removed.labels(kind=kind)

    # --- transactions -----------------------------------------------------------
    def resolved(self, state: MessageState, source: Source, age_seconds: float | None) -> None:
        """A half message left `prepared` for `state` by `source`, `age_seconds` after its
        prepare (None: not timed, as an operator's resolution)."""
        children = self._resolved_children.get((state, source))
        if children is None:  # a pair RESOLUTIONS does not list: counted all the same
            children = self._resolved_children[state, source] = (
                self._transactions_resolved.labels(state=state.value, source=source.value),
                self._resolution_latency.labels(state=state.value, source=source.value),
            )
        count, latency = children
        count.inc()
        if age_seconds is not None:
            latency.observe(age_seconds)

    # --- check-backs ------------------------------------------------------------
    def check_back_answered(self, resolution: Resolution) -> None:
        """A producer (or its group's database) answered a check-back."""
        self._check_backs_answered.labels(resolution=resolution.value).inc()

    def check_backs_dispatched(self, via: DispatchMode, amount: int = 1) -> None:
        if amount:
            self._check_backs_dispatched.labels(via=via.value).inc(amount)

    def check_backs_claimed(self, amount: int) -> None:
        self._check_backs_claimed.inc(amount)

    def check_backs_without_producer(self, amount: int) -> None:
        if amount:
            self._check_backs_without_producer.inc(amount)

    def check_back_push_failed(self) -> None:
        self._check_back_push_failures.inc()

    def database_check_back(self, outcome: str) -> None:
        """A check source answered: committed, rolled_back or failed."""
        self._check_backs_database.labels(outcome=outcome).inc()

    def check_round(self, seconds: float) -> None:
        self._check_round_seconds.observe(seconds)

    # --- delivery ---------------------------------------------------------------
    def redelivered(
        self, consumer_group: str, amount: int, most: int = DEFAULT_MAX_LABEL_VALUES
    ) -> None:
        if amount:
            group = _bounded_group(self._redelivery_groups, consumer_group, most)
            self._redeliveries.labels(consumer_group=group).inc(amount)

    # --- retention --------------------------------------------------------------
    def retention_round(
        self, result: RetentionResult, most: int = DEFAULT_MAX_LABEL_VALUES
    ) -> None:
        """What a retention round removed and dropped, when and how long, and the tables'
        figures it read."""
        for kind, amount in result.removed.items():
            if amount:
                self._retention_removed.labels(kind=kind).inc(amount)
        for group, lost in result.unacked.items():
            if lost:
                shown = _bounded_group(self._unacked_groups, group, most)
                self._retention_unacked_dropped.labels(consumer_group=shown).inc(lost)
        if result.started_at is not None:
            started = result.started_at.timestamp()
            self._retention_last_round.labels(figure="started").set(started)
        self._retention_last_round.labels(figure="seconds").set(result.duration_seconds)
        for table in result.tables:
            figures = self._table_figures
            figures.labels(table=table.table, figure="bytes").set(table.bytes)
            figures.labels(table=table.table, figure="rows").set(table.rows)
            figures.labels(table=table.table, figure="oldest_age_seconds").set(
                table.oldest_age_seconds or 0.0
            )
        self._idle_consumer_groups.set(len(result.idle_groups))

    # --- at scrape time -----------------------------------------------------------
    def set_pool_stats(self, stats: Mapping[str, int]) -> None:
        """From psycopg_pool's get_stats(): pool_size counts the connections given out too."""
        size = stats.get("pool_size", 0)
        idle = stats.get("pool_available", 0)
        self._db_pool_connections.labels(state="in_use").set(max(size - idle, 0))
        self._db_pool_connections.labels(state="idle").set(idle)
        self._db_pool_waiting.set(stats.get("requests_waiting", 0))

    def set_database_gauges(self, overview: Overview, most: int = DEFAULT_MAX_LABEL_VALUES) -> None:
        """The gauges of database state, from the overview read at scrape time, with at most
        `most` series per gauge."""
        # Rebuilt on every scrape so groups and topics with nothing left vanish.
        for gauge in (
            self._half_messages_outstanding,
            self._half_messages_oldest_age,
            self._producer_instances,
            self._consumer_lag,
            self._consumer_in_flight,
            self._dead_letters,
        ):
            gauge.clear()
        self._set_pending(overview.pending_groups, most)
        shown, folded = _bounded(overview.producers, lambda producers: producers.registered, most)
        counts = [(p.producer_group, p.live, p.registered) for p in shown]
        if folded:
            live = sum(p.live for p in folded)
            counts.append((OTHER, live, sum(p.registered for p in folded)))
        for group, live, registered in counts:
            instances = self._producer_instances
            instances.labels(producer_group=group, live="true").set(live)
            instances.labels(producer_group=group, live="false").set(registered - live)
        self._set_consumers(overview.consumers, most)

    def _set_pending(self, groups: Sequence[PendingGroup], most: int) -> None:
        outstanding, oldest_age = self._half_messages_outstanding, self._half_messages_oldest_age
        shown, folded = _bounded(groups, lambda pending: pending.pending, most)
        for pending in shown:
            labels = {"producer_group": pending.producer_group, "topic": pending.topic}
            outstanding.labels(**labels).set(pending.pending)
            oldest_age.labels(**labels).set(pending.oldest_age.total_seconds())
        if folded:
            other = {"producer_group": OTHER, "topic": OTHER}
            outstanding.labels(**other).set(sum(p.pending for p in folded))
            oldest_age.labels(**other).set(max(p.oldest_age for p in folded).total_seconds())

    def _set_consumers(self, consumers: Sequence[ConsumerFigures], most: int) -> None:
        shown, folded = _bounded(consumers, lambda consumer: consumer.lag, most)
        figures = [(c.consumer_group, c.topic, c.lag, c.in_flight, c.dead_letters) for c in shown]
        if folded:
            figures.append(
                (
                    OTHER,
                    OTHER,
                    sum(c.lag for c in folded),
                    sum(c.in_flight for c in folded),
                    sum(c.dead_letters for c in folded),
                )
            )
        for group, topic, lag, in_flight, dead_letters in figures:
            labels = {"consumer_group": group, "topic": topic}
            self._consumer_lag.labels(**labels).set(lag)
            self._consumer_in_flight.labels(**labels).set(in_flight)
            self._dead_letters.labels(**labels).set(dead_letters)

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)


def _bounded(
    rows: Sequence[Row], weight: Callable[[Row], float], most: int
) -> tuple[list[Row], list[Row]]:
    """The rows shown on their own (the heaviest) and those folded into `_other`."""
    if len(rows) <= most:
        return list(rows), []
    ranked = sorted(rows, key=weight, reverse=True)
    return ranked[: most - 1], ranked[most - 1 :]


def _bounded_group(seen: set[str], consumer_group: str, most: int) -> str:
    # A counter cannot be rebuilt per scrape: the first groups keep their own
    # series, later ones count under `_other`.
    if consumer_group not in seen:
        if len(seen) >= most - 1:
            return OTHER
        seen.add(consumer_group)
    return consumer_group
