"""Delivery times (delay and timer messages) and the handle that recalls one.

A message may name when it becomes receivable: RocketMQ 5's
`delivery_timestamp`. A time in the past means now; a time further ahead
than the coordinator's `max_delay_seconds` (RocketMQ's `timerMaxDelaySec`,
3 days by default) is refused. A half message may carry one too (RocketMQ
refuses that): it becomes receivable at the later of its time and its
commit, never before its commit.

A recall handle names one delayed message: RocketMQ 5.3 hands out
`base64url("v1 topic broker timestamp message_id")` and checks the topic on
recall. Ours is `base64url("v1 topic offset message_id")`: the coordinator
finds the message by its offset and refuses a handle whose topic or message
id is not the stored one, and the caller must be allowed to produce to the
topic. So a handle cannot be guessed from an offset alone, and no one can
recall a message of a topic they may not produce to.
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from coordinator.domain.errors import InvalidMessage

# RocketMQ 5's timerMaxDelaySec default: 3 days.
DEFAULT_MAX_DELAY_SECONDS = 3 * 24 * 3600.0
RECALL_HANDLE_MAX_LENGTH = 512
_VERSION = "v1"


def check_delivery_time(
    deliver_at: datetime | None, max_delay_seconds: float, *, now: datetime | None = None
) -> datetime | None:
    """The delivery time as stored (UTC; a time past is now), or InvalidMessage
    saying why it is refused."""
    if deliver_at is None:
        return None
    if deliver_at.tzinfo is None or deliver_at.utcoffset() is None:
        raise InvalidMessage("the delivery time needs a time zone (e.g. 2030-01-01T12:00:00Z)")
    now = now or datetime.now(UTC)
    ahead = (deliver_at - now).total_seconds()
    if ahead > max_delay_seconds:
        raise InvalidMessage(
            f"the delivery time {deliver_at.isoformat()} is {ahead:.0f} s ahead; at most "
            f"{max_delay_seconds:g} s (max_delay_seconds) is allowed"
        )
    if ahead <= 0:
        return now
    return deliver_at.astimezone(UTC)


def deliver_at_of(delay_seconds: float | None) -> datetime | None:
    """The delivery time `delay_seconds` from now (None: no delay)."""
    if delay_seconds is None:
        return None
    if not math.isfinite(delay_seconds) or delay_seconds < 0:
        raise InvalidMessage("the delay must be a number of seconds, 0 or more")
    try:
        return datetime.now(UTC) + timedelta(seconds=delay_seconds)
    except OverflowError:
        raise InvalidMessage(f"a delay of {delay_seconds:g} s is too long") from None


@dataclass(frozen=True, slots=True)
class RecallHandle:
    topic: str
    offset: int
    message_id: str

    def encode(self) -> str:
        text = f"{_VERSION} {self.topic} {self.offset} {self.message_id}"
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, handle: str) -> RecallHandle:
        refused = InvalidMessage(
            "the recall handle is not valid; give the one the send answered with"
        )
        if not handle or len(handle) > RECALL_HANDLE_MAX_LENGTH:
            raise refused
        try:
            padded = handle + "=" * (-len(handle) % 4)
            text = base64.urlsafe_b64decode(padded.encode("ascii")).decode()
        except (binascii.Error, UnicodeError, ValueError):
            raise refused from None
        parts = text.split(" ")
        if len(parts) != 4 or parts[0] != _VERSION or not parts[2].isdigit():
            raise refused
        offset = int(parts[2])
        if not 0 < offset < 2**63:
            raise refused
        return cls(topic=parts[1], offset=offset, message_id=parts[3])
