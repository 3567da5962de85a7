"""Plain data of the check-back engine, independent of any transport.

`CheckRequest.to_json()` is the wire format of a check request: the same JSON
object is returned by the long poll and POSTed to push producers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from coordinator.domain.messages import MessageFields
from coordinator.domain.states import DispatchMode, MessageState


@dataclass(frozen=True, slots=True)
class Producer:
    """A registered producer instance of a producer group."""

    producer_group: str
    instance_id: str
    check_url: str | None  # None: the instance pulls its check requests
    registered_at: datetime
    last_seen_at: datetime
    live: bool  # heard from within producer_ttl_seconds

    @property
    def mode(self) -> DispatchMode:
        return DispatchMode.PULL if self.check_url is None else DispatchMode.PUSH


@dataclass(frozen=True, slots=True)
class CheckRequest(MessageFields):
    """What a producer instance gets asked: the state of this local transaction?"""

    transaction_id: str
    producer_group: str
    check_count: int  # this is the message's check number `check_count` (1 for the first)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.fields_json(),
            "check_count": self.check_count,
            "born_at": self.born_at.isoformat(),
        }


class ClaimAction(StrEnum):
    """What a check-back round did with one due half message."""

    CHECK = "check"  # counted and addressed to a live instance
    WAIT = "wait"  # no live instance of its group: recorded, not counted
    DISCARD = "discard"  # check budget used up: now `discarded`
    EXPIRE = "expire"  # older than retention: now `expired`


@dataclass(frozen=True, slots=True)
class ClaimedCheck:
    """One due half message as a claim left it (committed before dispatch)."""

    offset: int
    transaction_id: str
    producer_group: str
    action: ClaimAction
    check_count: int
    instance_id: str | None = None
    check_url: str | None = None
    via: DispatchMode | None = None
    request: CheckRequest | None = None  # only for push: what to POST
    message_id: str | None = None


@dataclass(slots=True)
class RoundResult:
    """What one check-back round did, for logs, metrics and tests."""

    checked: list[ClaimedCheck] = field(default_factory=list)
    waiting: list[ClaimedCheck] = field(default_factory=list)
    discarded: list[ClaimedCheck] = field(default_factory=list)
    expired: list[ClaimedCheck] = field(default_factory=list)
    handed_to_push: int = 0  # pushes started; they run on after the round
    # Counted as the round's pushes finish, after the round (CheckRounds.settle):
    pushed: int = 0  # delivered to a push instance (2xx)
    push_failures: int = 0
    resolved_by_push: int = 0  # the push answer carried commit or rollback
    asked_database: int = 0  # answered by the group's check source (then ended)
    database_failures: int = 0  # the check source could not tell

    def add(self, claimed: list[ClaimedCheck]) -> None:
        lists = {
            ClaimAction.CHECK: self.checked,
            ClaimAction.WAIT: self.waiting,
            ClaimAction.DISCARD: self.discarded,
            ClaimAction.EXPIRE: self.expired,
        }
        for item in claimed:
            lists[item.action].append(item)

    @property
    def claimed(self) -> int:
        return len(self.checked) + len(self.waiting) + len(self.discarded) + len(self.expired)


@dataclass(frozen=True, slots=True)
class OperatorResult:
    """Answer to an operator's recheck, commit or rollback."""

    offset: int
    message_id: str
    transaction_id: str | None
    previous_state: MessageState
    state: MessageState
    changed: bool  # False when the message already was in the requested state
