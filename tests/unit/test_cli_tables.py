"""Tables fitted to the terminal: ids whole, other columns wrapped, blocks when too narrow."""

from __future__ import annotations

import pytest
from rich.console import Console

from coordinator.cli.tables import Column, fitted

MESSAGE_ID = "9F3C" * 8
COLUMNS = [
    Column("message id", whole=True),
    Column("consumer group", whole=True),
    Column("body"),
    Column("dead since"),
]
ROWS = [[MESSAGE_ID, "billing-eu-west-1", "order 1001 created " * 4, "2024-01-01 12:00:00"]]


def rendered(width: int) -> list[str]:
    console = Console(width=width, record=True)
    with console.capture() as captured:
        console.print(fitted("Dead letters", COLUMNS, ROWS, width))
    return captured.get().splitlines()


@pytest.mark.parametrize("width", [60, 80, 120, 200])
def test_ids_stay_whole_and_lines_fit(width: int) -> None:
    lines = rendered(width)
    assert max(len(line) for line in lines) <= width
    assert any(MESSAGE_ID in line for line in lines)
    assert any("billing-eu-west-1" in line for line in lines)


def test_a_wide_terminal_gets_a_table_a_narrow_one_blocks() -> None:
    assert any(line.startswith("message id") and "body" in line for line in rendered(120))
    narrow = rendered(50)
    assert any(line.split()[:2] == ["message", "id"] and MESSAGE_ID in line for line in narrow)
    assert not any("body" in line and "message id" in line for line in narrow)
