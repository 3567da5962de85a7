"""How the CLI writes durations and sizes for people."""

from __future__ import annotations

from datetime import timedelta

SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def age(delta: timedelta | float | None) -> str:
    if delta is None:
        return "-"
    seconds = int(delta.total_seconds() if isinstance(delta, timedelta) else delta)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{seconds:02d}s"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def size(count: int) -> str:
    """Bytes in binary units, one decimal from KiB up (as the status page writes them)."""
    value, unit = float(count), 0
    while value >= 1024 and unit < len(SIZE_UNITS) - 1:
        value /= 1024
        unit += 1
    return f"{count} B" if unit == 0 else f"{value:.1f} {SIZE_UNITS[unit]}"
