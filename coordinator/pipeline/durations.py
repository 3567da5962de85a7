"""Durations as people write them on a command line: 90s, 30m, 72h, 3d, 1.5h."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str) -> timedelta:
    match = _DURATION.match(text.lower())
    if match is None:
        raise ValueError(f"not a duration: {text!r} (write e.g. 90s, 30m, 72h, 3d)")
    amount, unit = match.groups()
    return timedelta(**{_UNITS[unit]: float(amount)})


def parse_moment(text: str) -> datetime:
    """An ISO 8601 date and time; without a zone it is UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not an ISO 8601 date and time: {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
