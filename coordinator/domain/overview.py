"""What the status page, `coordinator status` and the database gauges of /metrics show.

One `Overview` is read in one database snapshot (core/overview.py), so its
figures add up: the pending half messages by age and by producer group, the
oldest of them, resolutions per minute, check-back activity per producer
group, live producers, per consumer group and topic the lag, in-flight
deliveries and dead letters, and the storage: the size of each table the
retention job keeps, its oldest row, the idle consumer groups, and the last
retention round of the node that read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from coordinator.domain.retention import IdleConsumerGroup, RetentionResult, TableFigures
from coordinator.domain.states import CheckStatus

# Lower bounds (seconds) of the age buckets of pending half messages after the
# first, which starts at 0. RocketMQ checks a half message back first after 6 s
# (transaction_timeout_seconds), then every minute: a message older than a few
# minutes has been checked and not answered.
AGE_BOUNDS_SECONDS: tuple[float, ...] = (10.0, 60.0, 300.0, 1800.0, 7200.0)
AGE_BUCKET_LABELS: tuple[str, ...] = (
    "< 10 s",
    "10 s - 1 min",
    "1 - 5 min",
    "5 - 30 min",
    "30 min - 2 h",
    ">= 2 h",
)

# How many of the oldest pending half messages an overview lists.
OLDEST_LISTED = 10
# Resolutions per minute over this many minutes by default, and at most.
DEFAULT_MINUTES = 30
MAX_MINUTES = 120
# A consumer group's deliveries and dead letters are counted up to this many
# rows each (read in id order through their (consumer_group, id) index), so
# that a group with a huge backlog costs the overview a bounded read; beyond,
# the figures say "at least" (lag_capped, dead_letters_capped).
COUNT_LIMIT = 100_000
# check_requests claimed within this many seconds count as recent check-backs.
RECENT_CHECK_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class AgeBucket:
    label: str
    min_seconds: float
    max_seconds: float | None  # None: no upper bound
    messages: int


@dataclass(frozen=True, slots=True)
class PendingGroup:
    """Pending half messages of one producer group and topic."""

    producer_group: str
    topic: str
    pending: int
    due: int  # due for a check-back now
    oldest_age: timedelta


@dataclass(frozen=True, slots=True)
class OldHalfMessage:
    """One of the oldest pending half messages, with its latest check-back."""

    offset: int
    message_id: str
    transaction_id: str
    producer_group: str
    topic: str
    born_at: datetime
    age: timedelta
    check_count: int
    next_check_at: datetime | None
    check_status: CheckStatus | None  # None: never checked back yet
    check_detail: str | None


@dataclass(frozen=True, slots=True)
class MinuteCounts:
    """Half messages resolved in one minute, by new state, and how many by check-back answers."""

    minute: datetime
    committed: int = 0
    rolled_back: int = 0
    discarded: int = 0
    expired: int = 0
    by_check: int = 0  # committed or rolled back by a producer answering a check-back


@dataclass(frozen=True, slots=True)
class CheckBackGroup:
    """Check-back activity of one producer group."""

    producer_group: str
    pending: int  # pending half messages
    due: int  # of which due for a check-back now
    open: int  # check requests claimed, not yet handed over (pending or being pushed)
    delivered: int  # handed over, the producer has not answered yet
    failed: int  # pushes without a 2xx answer, waiting for the next check
    no_producer: int  # due while no instance of the group was live
    checked_recently: int  # check requests claimed in the last RECENT_CHECK_SECONDS
    last_failure: str | None  # the latest failed push's reason
    live_producers: int


@dataclass(frozen=True, slots=True)
class ProducerGroupCount:
    producer_group: str
    live: int
    registered: int
    # The group's check source (its own database answers its check-backs), if any.
    check_source_mode: str | None = None
    check_source_checked_at: datetime | None = None
    check_source_ok: bool | None = None
    check_source_error: str | None = None


@dataclass(frozen=True, slots=True)
class ConsumerFigures:
    """One consumer group's work on one topic."""

    consumer_group: str
    topic: str
    lag: int  # committed, not acked: ready and in flight
    in_flight: int  # received, invisible, not acked
    dead_letters: int
    oldest_pending_at: datetime | None
    lag_capped: bool  # the group has at least COUNT_LIMIT deliveries: lag is a lower bound
    dead_letters_capped: bool


@dataclass(frozen=True, slots=True)
class Storage:
    """What the tables the retention job keeps hold, and what it last did."""

    tables: tuple[TableFigures, ...]
    idle_consumer_groups: tuple[IdleConsumerGroup, ...]
    # Whether the node that read the overview runs retention rounds.
    retention_enabled: bool
    # That node's last round; None: it has run none yet (or is no node: the CLI).
    last_round: RetentionResult | None


@dataclass(frozen=True, slots=True)
class Overview:
    at: datetime  # the database's clock when the figures were read
    pending: int
    age_buckets: tuple[AgeBucket, ...]
    pending_groups: tuple[PendingGroup, ...]
    oldest: tuple[OldHalfMessage, ...]
    # Oldest first; the last one is the current minute, still filling.
    minutes: tuple[MinuteCounts, ...]
    check_backs: tuple[CheckBackGroup, ...]
    producers: tuple[ProducerGroupCount, ...]
    consumers: tuple[ConsumerFigures, ...]
    storage: Storage | None = None  # None: not read (/metrics' gauges need none)

    @property
    def oldest_age(self) -> timedelta | None:
        return self.oldest[0].age if self.oldest else None


def age_buckets(counts: dict[int, int]) -> tuple[AgeBucket, ...]:
    """Every bucket, empty ones too, from messages per bucket index (0 = youngest)."""
    lows = (0.0, *AGE_BOUNDS_SECONDS)
    highs: tuple[float | None, ...] = (*AGE_BOUNDS_SECONDS, None)
    return tuple(
        AgeBucket(label, low, high, counts.get(index, 0))
        for index, (label, low, high) in enumerate(zip(AGE_BUCKET_LABELS, lows, highs, strict=True))
    )
