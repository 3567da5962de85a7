"""Tables that fit the terminal without cutting what users copy.

Rich shrinks every column of a table too wide for the terminal, ids too,
and cuts them with an ellipsis. Here a column of ids (transaction and
message ids, group and token names) keeps its full width and never wraps;
the other columns share what is left and wrap (long words fold). When even
that does not fit, each row becomes a block of `name value` lines instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

# Below this, a wrapped column is more line breaks than text.
MIN_WRAPPED_WIDTH = 6


@dataclass(frozen=True)
class Column:
    header: str
    whole: bool = False  # an id users copy: printed whole, on one line
    right: bool = False  # numbers


def print_table(
    console: Console,
    title: str,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
) -> None:
    console.print(fitted(title, columns, rows, console.width))


def fitted(
    title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int
) -> RenderableType:
    """A table of `rows` at most `width` cells wide, ids whole; or one block per row."""
    widths = _widths(columns, rows, width - _overhead(len(columns)))
    if widths is None:
        return _records(title, columns, rows)
    table = _table(title)
    for column, column_width in zip(columns, widths, strict=True):
        table.add_column(
            column.header,
            width=column_width,
            no_wrap=column.whole,
            overflow="fold",
            justify="right" if column.right else "left",
        )
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    return table


def _table(title: str) -> Table:
    return Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)


def _overhead(count: int) -> int:
    """The cells a table of `count` columns spends on padding and rules."""
    probe = _table("")
    for _ in range(count):
        probe.add_column(width=1)
    console = Console(width=10_000)
    return Measurement.get(console, console.options, probe).maximum - count


def _natural(header: str, cells: list[str]) -> int:
    return max(cell_len(line) for text in [header, *cells] for line in text.splitlines() or [""])


def _widths(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], room: int
) -> list[int] | None:
    """Each column's width, ids at their natural width; None if they cannot all fit."""
    natural = [_natural(c.header, [row[i] for row in rows]) for i, c in enumerate(columns)]
    least = [
        width
        if column.whole
        else min(width, max(MIN_WRAPPED_WIDTH, *(cell_len(w) for w in column.header.split())))
        for column, width in zip(columns, natural, strict=True)
    ]
    if sum(least) > room:
        return None
    widths = list(natural)
    # Take from the widest wrapped column first, one cell at a time.
    while sum(widths) > room:
        i = max(
            (i for i, c in enumerate(columns) if not c.whole and widths[i] > least[i]),
            key=lambda i: widths[i],
        )
        widths[i] -= 1
    return widths


def _records(title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> Group:
    blocks: list[RenderableType] = [Text(title, style="italic")]
    for row in rows:
        block = Table.grid(padding=(0, 2))
        block.add_column(style="bold", no_wrap=True)
        block.add_column(overflow="fold")
        for column, cell in zip(columns, row, strict=True):
            block.add_row(column.header, Text(cell))
        blocks += [Text(""), block]
    return Group(*blocks)
