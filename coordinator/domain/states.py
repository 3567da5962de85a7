"""Message states, resolutions, the sources of state changes, and check-request states.

The string values are what the database stores (CHECK constraints in the
schema enforce them) and what the API and CLI show.
"""

from __future__ import annotations

from enum import StrEnum


class MessageState(StrEnum):
    PREPARED = "prepared"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"
    DISCARDED = "discarded"  # check budget (check_max) used up
    EXPIRED = "expired"  # older than retention and never resolved


class MessageKind(StrEnum):
    TRANSACTIONAL = "transactional"
    NORMAL = "normal"


class Resolution(StrEnum):
    """What a producer answers for its local transaction (LocalTransactionState)."""

    COMMIT = "commit"
    ROLLBACK = "rollback"
    UNKNOWN = "unknown"

    @property
    def target_state(self) -> MessageState | None:
        return _RESOLUTION_TARGET[self]


_RESOLUTION_TARGET: dict[Resolution, MessageState | None] = {
    Resolution.COMMIT: MessageState.COMMITTED,
    Resolution.ROLLBACK: MessageState.ROLLED_BACK,
    Resolution.UNKNOWN: None,
}


class Source(StrEnum):
    """Who caused a state change; recorded with every transition."""

    CLIENT = "client"  # the producer ending its own transaction
    CHECK = "check"  # the producer answering a check-back
    OPERATOR = "operator"  # a person, through the CLI
    DISCARD = "discard"  # the engine, check budget used up
    EXPIRY = "expiry"  # the engine, retention passed


FINAL_STATES: frozenset[MessageState] = frozenset(
    {MessageState.COMMITTED, MessageState.ROLLED_BACK, MessageState.EXPIRED}
)


class CheckStatus(StrEnum):
    """Where the latest check-back of a half message stands (one row per message)."""

    NO_PRODUCER = "no_producer"  # due, but the group had no live instance: not counted
    PENDING = "pending"  # claimed and addressed to an instance, not yet handed over
    PUSHING = "pushing"  # being POSTed to the instance's check URL
    DELIVERED = "delivered"  # pulled by, or pushed to, the instance
    FAILED = "failed"  # the push failed; the message waits for its next check


class DispatchMode(StrEnum):
    PULL = "pull"  # the instance long-polls for its check requests
    PUSH = "push"  # the coordinator POSTs the check request to the instance's URL
    DATABASE = "database"  # the coordinator asks the group's own database (its check source)
