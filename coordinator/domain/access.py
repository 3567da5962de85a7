"""Who may do what: a token's grants, and the checks every door makes with them.

A token grants any of four permissions:

- produce: send to `produce_topics`, as (and end, and be checked back for)
  the producer groups `producer_groups`;
- consume: subscribe the consumer groups `consume_groups` to `consume_topics`,
  and receive, ack and read dead letters as those groups;
- admin: everything, including operator reads (status, any message, any
  group's subscriptions and producers), dead-letter requeue and metrics;
- metrics: /metrics (and the status page).

Names are matched against shell-style patterns (`orders`, `order-*`, `*`).
With authentication off every request is the anonymous principal, which may
do everything. The checks raise PermissionDenied with a sentence; they are
the same for HTTP and any later door.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from fnmatch import fnmatchcase

from coordinator.domain.errors import InvalidMessage, PermissionDenied
from coordinator.domain.rules import storable

ANONYMOUS = "anonymous"
PATTERN_MAX_LENGTH = 255


def check_patterns(what: str, patterns: Sequence[str]) -> tuple[str, ...]:
    """Patterns as a token stores them: non-empty, no blanks, no NUL."""
    for pattern in patterns:
        if not pattern or pattern != pattern.strip() or not storable(pattern):
            raise InvalidMessage(f"{what} pattern {pattern!r} must be a non-empty name or glob")
        if len(pattern) > PATTERN_MAX_LENGTH:
            raise InvalidMessage(f"{what} pattern is longer than {PATTERN_MAX_LENGTH} characters")
    return tuple(dict.fromkeys(patterns))


def _matches(patterns: Sequence[str], name: str) -> bool:
    return any(fnmatchcase(name, pattern) for pattern in patterns)


@dataclass(frozen=True, slots=True)
class Grants:
    produce_topics: tuple[str, ...] = ()
    producer_groups: tuple[str, ...] = ()
    consume_groups: tuple[str, ...] = ()
    consume_topics: tuple[str, ...] = ()
    admin: bool = False
    metrics: bool = False

    @classmethod
    def everything(cls) -> Grants:
        return cls(("*",), ("*",), ("*",), ("*",), admin=True, metrics=True)

    def by_field(self) -> dict[str, list[str] | bool]:
        """Every grant by field name, the patterns as lists (SQL parameters, JSON)."""
        return {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in asdict(self).items()
        }

    @property
    def permissions(self) -> tuple[str, ...]:
        """The permissions granted, by name, for listings."""
        names = []
        if self.produce_topics and self.producer_groups:
            names.append("produce")
        if self.consume_groups and self.consume_topics:
            names.append("consume")
        if self.admin:
            names.append("admin")
        if self.metrics or self.admin:
            names.append("metrics")
        return tuple(names)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request comes from: a token's name and its grants."""

    name: str
    grants: Grants

    @classmethod
    def anonymous(cls) -> Principal:
        return cls(ANONYMOUS, Grants.everything())

    def _deny(self, what: str) -> PermissionDenied:
        return PermissionDenied(f"token {self.name!r} may not {what}")

    @property
    def is_admin(self) -> bool:
        return self.grants.admin

    def require_admin(self, what: str) -> None:
        if not self.grants.admin:
            raise self._deny(f"{what} (needs the admin permission)")

    def require_metrics(self) -> None:
        if not (self.grants.metrics or self.grants.admin):
            raise self._deny("read metrics (needs the metrics permission)")

    def may_act_as_producer_group(self, producer_group: str) -> bool:
        return self.grants.admin or _matches(self.grants.producer_groups, producer_group)

    def require_producer_group(self, producer_group: str) -> None:
        """Ends, heartbeats and check-back polls of `producer_group`."""
        if not self.may_act_as_producer_group(producer_group):
            raise self._deny(f"act for producer group {producer_group!r}")

    def require_produce(self, topic: str, producer_group: str | None) -> None:
        """Sending to `topic` (as `producer_group`, which a half message always names)."""
        if self.grants.admin:
            return
        if not _matches(self.grants.produce_topics, topic):
            raise self._deny(f"send to topic {topic!r}")
        if producer_group is not None:
            self.require_producer_group(producer_group)

    def require_consumer_group(self, consumer_group: str) -> None:
        """Receive, ack, lag and dead letters of `consumer_group`."""
        if not (self.grants.admin or _matches(self.grants.consume_groups, consumer_group)):
            raise self._deny(f"consume as consumer group {consumer_group!r}")

    def require_consume(self, consumer_group: str, topic: str) -> None:
        """Subscribing `consumer_group` to `topic` (or receiving only that topic)."""
        self.require_consumer_group(consumer_group)
        if not (self.grants.admin or _matches(self.grants.consume_topics, topic)):
            raise self._deny(f"consume topic {topic!r}")

    def may_read_message(self, producer_group: str | None) -> bool:
        """Reading a stored message (its body): its own producer group, or an admin."""
        if self.grants.admin:
            return True
        return producer_group is not None and _matches(self.grants.producer_groups, producer_group)

    def require_read_message(self, producer_group: str | None) -> None:
        if not self.may_read_message(producer_group):
            raise self._deny("read this message (it belongs to another producer group)")
