"""Check immunity: how long a half message is left alone before its first check-back.

A producer gives it as the message's `check_immunity_seconds` or, as RocketMQ
producers do, as the user property CHECK_IMMUNITY_TIME_IN_SECONDS; the field
wins when both are given (as the RocketMQ proxy writes the gRPC recovery
duration over the property). Either is held to the same bounds: positive, and
short enough to leave one check interval before the message expires at the
retention, or it would expire without ever being checked back.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

from coordinator.domain.errors import InvalidMessage
from coordinator.domain.messages import NewMessage

# RocketMQ's MessageConst.PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS.
CHECK_IMMUNITY_PROPERTY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
# Whole seconds as RocketMQ writes them, or a decimal fraction of them.
_SECONDS = re.compile(r"[0-9]{1,15}(\.[0-9]{1,9})?")


def longest_check_immunity(retention_seconds: float, check_interval_seconds: float) -> float:
    """The longest immunity that still leaves one check-back before expiry."""
    return retention_seconds - check_interval_seconds


def check_immunity(seconds: float | None, longest: float) -> float | None:
    if seconds is None:
        return None
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidMessage("check immunity must be a positive number of seconds")
    if seconds > longest:
        raise InvalidMessage(
            f"check immunity of {seconds:g} s is too long: at most {max(longest, 0):g} s "
            "(the retention less one check interval), so that the message is checked back "
            "at least once before it expires"
        )
    return seconds


def with_property_immunity(message: NewMessage) -> NewMessage:
    """The half message with the immunity its CHECK_IMMUNITY_TIME_IN_SECONDS property gives,
    unless its `check_immunity_seconds` is set already."""
    value = message.properties.get(CHECK_IMMUNITY_PROPERTY)
    if value is None or message.check_immunity_seconds is not None:
        return message
    if not _SECONDS.fullmatch(value.strip()):
        raise InvalidMessage(
            f"property {CHECK_IMMUNITY_PROPERTY} must be a number of seconds, got {value[:40]!r}"
        )
    return replace(message, check_immunity_seconds=float(value))
