"""Prometheus metrics, served at /metrics.

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
a scrape shows read as one list.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from prometheus_client import (
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from coordinator.domain.errors import CoordinatorError
from coordinator.domain.messages import EndRequest, EndResult
from coordinator.domain.overview import COUNT_LIMIT, ConsumerFigures, Overview, PendingGroup
from coordinator.domain.states import DispatchMode, MessageState, Resolution, Source

HALF_MESSAGES_OUTSTANDING = Gauge(
    "coordinator_half_messages_outstanding",
    "Half messages still prepared (neither committed, rolled back, discarded nor expired).",
    ["producer_group", "topic"],
)
PRODUCER_INSTANCES = Gauge(
    "coordinator_producer_instances",
    "Registered producer instances, and how many of them are live.",
    ["producer_group", "live"],
)
HALF_MESSAGES_OLDEST_AGE = Gauge(
    "coordinator_half_messages_oldest_age_seconds",
    "Age of the oldest half message still prepared.",
    ["producer_group", "topic"],
)
CONSUMER_LAG = Gauge(
    "coordinator_consumer_lag",
    "Committed messages a consumer group has not acked yet (ready and in flight); counted "
    f"up to {COUNT_LIMIT:,} per consumer group.",
    ["consumer_group", "topic"],
)
CONSUMER_IN_FLIGHT = Gauge(
    "coordinator_consumer_in_flight",
    "Messages a consumer group received and has not acked, still invisible to the others.",
    ["consumer_group", "topic"],
)
DEAD_LETTERS = Gauge(
    "coordinator_dead_letters",
    "Dead-lettered deliveries of a consumer group (out of delivery attempts), until requeued.",
    ["consumer_group", "topic"],
)
TRANSACTIONS_RESOLVED = Counter(
    "coordinator_transactions_resolved",
    "Half messages leaving `prepared`, by new state (committed, rolled_back, discarded, "
    "expired) and source (client, check, operator, discard, expiry).",
    ["state", "source"],
)
CHECK_BACKS_DISPATCHED = Counter(
    "coordinator_check_backs_dispatched",
    "Check requests handed to producer instances, by how (pull or push).",
    ["via"],
)
CHECK_BACKS_DATABASE = Counter(
    "coordinator_check_backs_database",
    "Check-backs answered by producer groups' own databases (check sources), by outcome: "
    "committed, rolled_back, or failed (the message waits for its next check).",
    ["outcome"],
)
CHECK_BACKS_CLAIMED = Counter(
    "coordinator_check_backs_claimed",
    "Due half messages whose check this process's check-back rounds claimed and addressed "
    "to a live producer instance (with several nodes or workers, each counts its own).",
)
CHECK_BACK_PUSH_FAILURES = Counter(
    "coordinator_check_back_push_failures",
    "Pushed check requests that got no 2xx answer (the message waits for its next check).",
)
CHECK_BACKS_WITHOUT_PRODUCER = Counter(
    "coordinator_check_backs_without_producer",
    "Due check-backs of groups with no live instance (not counted against the budget).",
)
CHECK_ROUND_SECONDS = Histogram(
    "coordinator_check_round_seconds",
    "Duration of one check-back round (claims and pushes) on this node.",
)

RETENTION_REMOVED = Counter(
    "coordinator_retention_removed",
    "Rows this process's retention rounds removed, by kind: messages (with their history), "
    "unacked_deliveries, dead_letters, consumer_groups.",
    ["kind"],
)
RETENTION_UNACKED_DROPPED = Counter(
    "coordinator_retention_unacked_dropped",
    "Deliveries a consumer group never acked, dropped at unacked_retention_hours, by group.",
    ["consumer_group"],
)
RETENTION_LAST_ROUND = Gauge(
    "coordinator_retention_last_round",
    "This process's last retention round: when it started (unix seconds) and how long it took.",
    ["figure"],
)
TABLE_FIGURES = Gauge(
    "coordinator_table",
    "Tables the retention job keeps to size, as its last round read them: bytes on disk, "
    "estimated rows and the age of the oldest row in seconds.",
    ["table", "figure"],
)
IDLE_CONSUMER_GROUPS = Gauge(
    "coordinator_idle_consumer_groups",
    "Consumer groups that have not received for idle_consumer_group_hours.",
)

# A `_created` series beside every counter and histogram doubles what a
# scrape carries and what Prometheus stores, for a start time nobody reads.
disable_created_metrics()

# From a client's commit a few milliseconds after its prepare to an expiry
# after the retention (72 hours by default).
RESOLUTION_LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800,
    3600, 4 * 3600, 24 * 3600, 72 * 3600,
)  # fmt: skip
RESOLUTION_LATENCY = Histogram(
    "coordinator_resolution_latency_seconds",
    "Time from a half message's prepare (born_at) to its resolution, by new state and source.",
    ["state", "source"],
    buckets=RESOLUTION_LATENCY_BUCKETS,
)
CHECK_BACKS_ANSWERED = Counter(
    "coordinator_check_backs_answered",
    "Producers' answers to check-backs (pulled or pushed), by resolution (commit, rollback, "
    "unknown).",
    ["resolution"],
)
REDELIVERIES = Counter(
    "coordinator_redeliveries",
    "Deliveries handed out again (delivery attempt above 1), by consumer group.",
    ["consumer_group"],
)
# Long polls (receive, check-back polls) wait up to 30 s.
REQUEST_SECONDS_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30,
)  # fmt: skip
HTTP_REQUESTS = Counter(
    "coordinator_http_requests",
    "HTTP requests answered, by method, route template (never the raw path) and status.",
    ["method", "route", "status"],
)
HTTP_REQUEST_SECONDS = Histogram(
    "coordinator_http_request_duration_seconds",
    "Time to answer an HTTP request, by method and route template.",
    ["method", "route"],
    buckets=REQUEST_SECONDS_BUCKETS,
)
GRPC_REQUESTS = Counter(
    "coordinator_grpc_requests",
    "RocketMQ gRPC calls answered, by RPC and the RocketMQ status code of the answer.",
    ["rpc", "code"],
)
GRPC_REQUEST_SECONDS = Histogram(
    "coordinator_grpc_request_duration_seconds",
    "Time to answer a RocketMQ gRPC call (a Telemetry stream is not timed: it lasts), by RPC.",
    ["rpc"],
    buckets=REQUEST_SECONDS_BUCKETS,
)
DB_POOL_CONNECTIONS = Gauge(
    "coordinator_db_pool_connections",
    "Connections of this process's database pool, in use or idle.",
    ["state"],
)
DB_POOL_WAITING = Gauge(
    "coordinator_db_pool_waiting",
    "Requests of this process waiting for a connection of the pool.",
)

# The counters' known label sets exist from the start, at 0. A series that
# first appears at 1 has no increase to Prometheus (rate() and increase()
# need two samples), so the first discard after a start would slip past the
# alert rules.
for _state, _sources in {
    MessageState.COMMITTED: (Source.CLIENT, Source.CHECK, Source.OPERATOR),
    MessageState.ROLLED_BACK: (Source.CLIENT, Source.CHECK, Source.OPERATOR),
    MessageState.DISCARDED: (Source.DISCARD,),
    MessageState.EXPIRED: (Source.EXPIRY,),
}.items():
    for _source in _sources:
        TRANSACTIONS_RESOLVED.labels(state=_state.value, source=_source.value)
for _via in DispatchMode:
    CHECK_BACKS_DISPATCHED.labels(via=_via.value)
for _outcome in ("committed", "rolled_back", "failed"):
    CHECK_BACKS_DATABASE.labels(outcome=_outcome)
for _resolution in Resolution:
    CHECK_BACKS_ANSWERED.labels(resolution=_resolution.value)
for _kind in ("messages", "unacked_deliveries", "dead_letters", "consumer_groups"):
    RETENTION_REMOVED.labels(kind=_kind)


# Series by group (and topic) per metric: see the module's docstring.
OTHER = "_other"
DEFAULT_MAX_LABEL_VALUES = 1000  # max_metric_label_values' default
_redelivery_groups: set[str] = set()

Row = TypeVar("Row")


def _bounded(
    rows: Sequence[Row], weight: Callable[[Row], float], most: int
) -> tuple[list[Row], list[Row]]:
    """The rows shown on their own (the heaviest) and those folded into `_other`."""
    if len(rows) <= most:
        return list(rows), []
    ranked = sorted(rows, key=weight, reverse=True)
    return ranked[: most - 1], ranked[most - 1 :]


_resolved_children: dict[tuple[MessageState, Source], Any] = {}


def count_resolution(state: MessageState, source: Source, amount: int = 1) -> None:
    if amount:
        # Counted for every end of both doors: the child is looked up once (see RequestMeter).
        child = _resolved_children.get((state, source))
        if child is None:
            child = _resolved_children[state, source] = TRANSACTIONS_RESOLVED.labels(
                state=state.value, source=source.value
            )
        child.inc(amount)


def count_ends(
    requests: Sequence[EndRequest], outcomes: Sequence[EndResult | CoordinatorError]
) -> None:
    """Producers' ends (their own or answering a check-back) that changed a state."""
    if len(requests) == 1:  # a single end (the doors' hot path): no tally to build
        request, outcome = requests[0], outcomes[0]
        if isinstance(outcome, EndResult) and outcome.changed:
            source = Source.CHECK if request.from_check else Source.CLIENT
            count_resolution(outcome.state, source)
        if request.from_check and request.resolution is not Resolution.UNKNOWN:
            count_check_back_answer(request.resolution)
        return
    # Counted per (state, source) first: a labelled inc per request took a lock
    # and two lookups each, for every message of a batch.
    changed = collections.Counter(
        (outcome.state, Source.CHECK if request.from_check else Source.CLIENT)
        for request, outcome in zip(requests, outcomes, strict=True)
        if isinstance(outcome, EndResult) and outcome.changed
    )
    for (state, source), amount in changed.items():
        count_resolution(state, source, amount)
    # UNKNOWN answers never get here with a state to change: ending.report_unknown counts them.
    for request in requests:
        if request.from_check and request.resolution is not Resolution.UNKNOWN:
            count_check_back_answer(request.resolution)


def set_database_gauges(overview: Overview, most: int = DEFAULT_MAX_LABEL_VALUES) -> None:
    """The gauges of database state, from the overview read at scrape time, with at most
    `most` series per gauge."""
    # Rebuilt on every scrape so groups and topics with nothing left vanish.
    for gauge in (
        HALF_MESSAGES_OUTSTANDING,
        HALF_MESSAGES_OLDEST_AGE,
        PRODUCER_INSTANCES,
        CONSUMER_LAG,
        CONSUMER_IN_FLIGHT,
        DEAD_LETTERS,
    ):
        gauge.clear()
    _set_pending(overview.pending_groups, most)
    shown, folded = _bounded(overview.producers, lambda producers: producers.registered, most)
    counts = [(p.producer_group, p.live, p.registered) for p in shown]
    if folded:
        live = sum(p.live for p in folded)
        counts.append((OTHER, live, sum(p.registered for p in folded)))
    for group, live, registered in counts:
        PRODUCER_INSTANCES.labels(producer_group=group, live="true").set(live)
        PRODUCER_INSTANCES.labels(producer_group=group, live="false").set(registered - live)
    _set_consumers(overview.consumers, most)


def _set_pending(groups: Sequence[PendingGroup], most: int) -> None:
    shown, folded = _bounded(groups, lambda pending: pending.pending, most)
    for pending in shown:
        labels = {"producer_group": pending.producer_group, "topic": pending.topic}
        HALF_MESSAGES_OUTSTANDING.labels(**labels).set(pending.pending)
        HALF_MESSAGES_OLDEST_AGE.labels(**labels).set(pending.oldest_age.total_seconds())
    if folded:
        other = {"producer_group": OTHER, "topic": OTHER}
        HALF_MESSAGES_OUTSTANDING.labels(**other).set(sum(p.pending for p in folded))
        oldest = max(p.oldest_age for p in folded)
        HALF_MESSAGES_OLDEST_AGE.labels(**other).set(oldest.total_seconds())


def _set_consumers(consumers: Sequence[ConsumerFigures], most: int) -> None:
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
        CONSUMER_LAG.labels(**labels).set(lag)
        CONSUMER_IN_FLIGHT.labels(**labels).set(in_flight)
        DEAD_LETTERS.labels(**labels).set(dead_letters)


_latency_children: dict[tuple[MessageState, Source], Histogram] = {}


def observe_resolution_latency(state: MessageState, source: Source, seconds: float) -> None:
    # Observed for every end of the hot routes: the child is looked up once (see RequestMeter).
    child = _latency_children.get((state, source))
    if child is None:
        child = _latency_children[state, source] = RESOLUTION_LATENCY.labels(
            state=state.value, source=source.value
        )
    child.observe(seconds)


def count_check_back_answer(resolution: Resolution) -> None:
    CHECK_BACKS_ANSWERED.labels(resolution=resolution.value).inc()


def count_redeliveries(
    consumer_group: str, amount: int, most: int = DEFAULT_MAX_LABEL_VALUES
) -> None:
    if amount:
        group = _bounded_group(_redelivery_groups, consumer_group, most)
        REDELIVERIES.labels(consumer_group=group).inc(amount)


def count_unacked_dropped(
    consumer_group: str, amount: int, most: int = DEFAULT_MAX_LABEL_VALUES
) -> None:
    if amount:
        group = _bounded_group(_unacked_groups, consumer_group, most)
        RETENTION_UNACKED_DROPPED.labels(consumer_group=group).inc(amount)


_unacked_groups: set[str] = set()


def _bounded_group(seen: set[str], consumer_group: str, most: int) -> str:
    # A counter cannot be rebuilt per scrape: the first groups keep their own
    # series, later ones count under `_other`.
    if consumer_group not in seen:
        if len(seen) >= most - 1:
            return OTHER
        seen.add(consumer_group)
    return consumer_group


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


HTTP_METER = RequestMeter(HTTP_REQUESTS, HTTP_REQUEST_SECONDS)
GRPC_METER = RequestMeter(GRPC_REQUESTS, GRPC_REQUEST_SECONDS)


def set_pool_stats(stats: Mapping[str, int]) -> None:
    """From psycopg_pool's get_stats(): pool_size counts the connections given out too."""
    size = stats.get("pool_size", 0)
    idle = stats.get("pool_available", 0)
    DB_POOL_CONNECTIONS.labels(state="in_use").set(max(size - idle, 0))
    DB_POOL_CONNECTIONS.labels(state="idle").set(idle)
    DB_POOL_WAITING.set(stats.get("requests_waiting", 0))


def exposition() -> bytes:
    """The text format Prometheus scrapes."""
    return generate_latest(REGISTRY)
