"""Records from query rows: each field takes the column of its own name.

The queries name their columns after the fields they fill, so a row maps
onto a record without a line per field; only renamed or converted fields
(enums, tuples, bytes) are given explicitly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

T = TypeVar("T")


def record_from_row(cls: type[T], row: Mapping[str, Any], /, **given: Any) -> T:
    """`cls(**given)`, with every other field taken from the row's column of that name."""
    by_name = {
        field.name: row[field.name]
        for field in fields(cls)  # type: ignore[arg-type]  # a record type is a dataclass
        if field.init and field.name not in given and field.name in row
    }
    return cls(**by_name, **given)
