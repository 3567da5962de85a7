"""A figure as people read it, on the report's page and in the pipeline commands' tables.

No pyarrow, no Spark: the CLI imports it without the 'pipeline' extra.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any


def display_value(value: Any, *, decimals: int) -> str:
    """A figure as people read it: thousands separated, times to the second, None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{decimals}f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return str(value)
