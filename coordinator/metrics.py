"""Prometheus metrics, served at /metrics.

Counters count what this process did (sum them over coordinator nodes).
Gauges of database state (outstanding half messages, live producers) are
read from PostgreSQL at scrape time, so every node reports the same
cluster-wide figure (take the max, not the sum).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, generate_latest

from coordinator.domain.errors import CoordinatorError
from coordinator.domain.messages import EndRequest, EndResult
from coordinator.domain.states import MessageState, Source

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


def count_resolution(state: MessageState, source: Source, amount: int = 1) -> None:
    if amount:
        TRANSACTIONS_RESOLVED.labels(state=state.value, source=source.value).inc(amount)


def count_ends(
    requests: Sequence[EndRequest], outcomes: Sequence[EndResult | CoordinatorError]
) -> None:
    """Producers' ends (their own or answering a check-back) that changed a state."""
    # Counted per (state, source) first: a labelled inc per request took a lock
    # and two lookups each, for every message of a batch.
    changed = collections.Counter(
        (outcome.state, Source.CHECK if request.from_check else Source.CLIENT)
        for request, outcome in zip(requests, outcomes, strict=True)
        if isinstance(outcome, EndResult) and outcome.changed
    )
    for (state, source), amount in changed.items():
        count_resolution(state, source, amount)


def set_outstanding(rows: list[tuple[str, str, int]]) -> None:
    # Rebuilt on every scrape so groups and topics with nothing pending vanish.
    HALF_MESSAGES_OUTSTANDING.clear()
    for producer_group, topic, messages in rows:
        HALF_MESSAGES_OUTSTANDING.labels(producer_group=producer_group, topic=topic).set(messages)


def set_producer_instances(rows: list[tuple[str, int, int]]) -> None:
    PRODUCER_INSTANCES.clear()
    for producer_group, live, registered in rows:
        PRODUCER_INSTANCES.labels(producer_group=producer_group, live="true").set(live)
        PRODUCER_INSTANCES.labels(producer_group=producer_group, live="false").set(
            registered - live
        )


def exposition() -> bytes:
    """The text format Prometheus scrapes."""
    return generate_latest(REGISTRY)
