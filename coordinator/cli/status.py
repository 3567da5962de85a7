"""`coordinator status`: the status page's figures in the terminal, once or live (--watch).

The same overview as GET /v1/overview (core/overview.py): half messages
pending by age and the oldest of them, resolutions per minute, check-backs
per producer group, live producers, per consumer group the lag, in
flight and dead letters, and the storage (status_storage.py). `--json`
prints the endpoint's JSON.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager, suppress

import typer
from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from coordinator.cli.common import JSON_OPTION, console, open_core, print_json, run_async
from coordinator.cli.formats import age
from coordinator.cli.status_storage import storage_parts
from coordinator.cli.tables import Column, fitted
from coordinator.core import Coordinator
from coordinator.domain.overview import MAX_MINUTES, MinuteCounts, Overview, ProducerGroupCount
from coordinator.views.overview import OverviewOut

SPARKS = " ▁▂▃▄▅▆▇█"
BAR = "█"
STATE_STYLES = {
    "committed": "green",
    "rolled_back": "bright_black",
    "discarded": "yellow",
    "expired": "red",
    "by_check": "blue",
}
STATE_NAMES = {
    "committed": "committed",
    "rolled_back": "rolled back",
    "discarded": "discarded",
    "expired": "expired",
    "by_check": "answered by check-back",
}


def _times(count: int) -> str:
    return {0: "never", 1: "once"}.get(count, f"{count} times")


def sparkline(values: Sequence[int], top: int) -> str:
    """One character per value, its height proportional to `top`; nothing at all for 0."""
    if top <= 0:
        return " " * len(values)
    steps = len(SPARKS) - 1
    return "".join(SPARKS[0 if v == 0 else max(1, round(v / top * steps))] for v in values)


def _rates(minutes: Sequence[MinuteCounts]) -> RenderableType:
    table = Table(
        title=f"Resolutions per minute, last {len(minutes)} min (the last one still filling)",
        title_justify="left",
        box=None,
        pad_edge=False,
    )
    table.add_column("")
    span = f"{minutes[0].minute.astimezone():%H:%M} .. {minutes[-1].minute.astimezone():%H:%M}"
    table.add_column(span if len(span) <= len(minutes) else "", no_wrap=True)
    table.add_column("in window", justify="right")
    table.add_column("last full min", justify="right")
    top = max((getattr(m, key) for m in minutes for key in STATE_STYLES), default=0)
    for key, style in STATE_STYLES.items():
        values = [getattr(m, key) for m in minutes]
        table.add_row(
            Text(STATE_NAMES[key], style=style),
            Text(sparkline(values, top), style=style),
            f"{sum(values):,}",
            f"{values[-2]:,}" if len(values) > 1 else "-",
        )
    return table


def _ages(overview: Overview, width: int) -> RenderableType:
    table = Table(
        title="Half messages still prepared, by age", title_justify="left", box=None, pad_edge=False
    )
    table.add_column("age", no_wrap=True)
    table.add_column("", no_wrap=True)
    table.add_column("messages", justify="right")
    most = max((b.messages for b in overview.age_buckets), default=0)
    room = max(10, min(50, width - 40))
    for index, bucket in enumerate(overview.age_buckets):
        length = round(bucket.messages / most * room) if most else 0
        bar = BAR * max(length, 1 if bucket.messages else 0)
        table.add_row(
            bucket.label,
            Text(bar, style="yellow" if index >= 3 else "blue"),
            f"{bucket.messages:,}",
        )
    return table


def render(overview: Overview, *, width: int, footer: str = "") -> RenderableType:
    """Everything the status page shows, as one renderable for `width` columns."""
    lag = sum(c.lag for c in overview.consumers)
    capped = "+" if any(c.lag_capped for c in overview.consumers) else ""
    full_minute = overview.minutes[-2].committed if len(overview.minutes) > 1 else None
    summary = Text.assemble(
        ("coordinator status", "bold"),
        f"  as of {overview.at.astimezone():%H:%M:%S}   ",
        (f"{overview.pending:,}", "bold"),
        " pending   oldest ",
        (age(overview.oldest_age), "bold"),
        "   commits last full minute ",
        ("-" if full_minute is None else f"{full_minute:,}", "bold"),
        "   consumer lag ",
        (f"{lag:,}{capped}", "bold"),
        "   dead letters ",
        (f"{sum(c.dead_letters for c in overview.consumers):,}", "bold"),
        "   producers live ",
        (f"{sum(p.live for p in overview.producers):,}", "bold"),
    )
    parts: list[RenderableType] = [summary, Text("")]
    if overview.minutes:
        parts += [_rates(overview.minutes), Text("")]
    parts += [_ages(overview, width), Text("")]
    if overview.oldest:
        first = overview.oldest[0]
        parts.append(
            Text(
                f"{overview.pending:,} pending; oldest: transaction {first.transaction_id} "
                f"({first.producer_group} -> {first.topic}), age {age(first.age)}, "
                f"checked {_times(first.check_count)}"
            )
        )
        parts.append(
            fitted(
                "Oldest pending",
                [
                    Column("transaction id", whole=True),
                    Column("producer group", whole=True),
                    Column("topic", whole=True),
                    Column("age", right=True),
                    Column("checks", right=True),
                    Column("last check"),
                ],
                [
                    [
                        m.transaction_id,
                        m.producer_group,
                        m.topic,
                        age(m.age),
                        str(m.check_count),
                        (m.check_status.value.replace("_", " ") if m.check_status else "not yet")
                        + (f": {m.check_detail}" if m.check_detail else ""),
                    ]
                    for m in overview.oldest
                ],
                width,
            )
        )
    else:
        parts.append(Text("No pending transactions."))
    if overview.check_backs:
        parts.append(
            fitted(
                "Check-backs by producer group",
                [
                    Column("producer group", whole=True),
                    Column("pending", right=True),
                    Column("due", right=True),
                    Column("checked 5 min", right=True),
                    Column("awaiting answer", right=True),
                    Column("handing over", right=True),
                    Column("push failed", right=True),
                    Column("no producer", right=True),
                    Column("live", right=True),
                    Column("last failure"),
                ],
                [
                    [
                        c.producer_group,
                        f"{c.pending:,}",
                        f"{c.due:,}",
                        f"{c.checked_recently:,}",
                        f"{c.delivered:,}",
                        f"{c.open:,}",
                        f"{c.failed:,}",
                        f"{c.no_producer:,}",
                        f"{c.live_producers:,}",
                        c.last_failure or "",
                    ]
                    for c in overview.check_backs
                ],
                width,
            )
        )
    if overview.producers:
        parts.append(
            fitted(
                "Producers",
                [
                    Column("producer group", whole=True),
                    Column("live", right=True),
                    Column("registered", right=True),
                    Column("check source"),
                ],
                [
                    [p.producer_group, f"{p.live:,}", f"{p.registered:,}", _source(p)]
                    for p in overview.producers
                ],
                width,
            )
        )
    if overview.consumers:
        parts.append(
            fitted(
                "Consumer groups",
                [
                    Column("consumer group", whole=True),
                    Column("topic", whole=True),
                    Column("lag", right=True),
                    Column("in flight", right=True),
                    Column("dead letters", right=True),
                    Column("oldest unacked", right=True),
                ],
                [
                    [
                        c.consumer_group,
                        c.topic,
                        f"{c.lag:,}" + ("+" if c.lag_capped else ""),
                        f"{c.in_flight:,}",
                        f"{c.dead_letters:,}" + ("+" if c.dead_letters_capped else ""),
                        age(overview.at - c.oldest_pending_at) if c.oldest_pending_at else "-",
                    ]
                    for c in overview.consumers
                ],
                width,
            )
        )
    if overview.storage is not None:
        parts += storage_parts(overview.storage, overview.at, width)
    if footer:
        parts += [Text(""), Text(footer, style="italic")]
    return Group(*parts)


def status(
    ctx: typer.Context,
    watch: bool = typer.Option(
        False, "--watch", "-w", help="Keep showing the figures, read again every --interval."
    ),
    interval: float = typer.Option(
        2.0, "--interval", min=0.2, max=3600, help="Seconds between two reads with --watch."
    ),
    minutes: int = typer.Option(
        15, "--minutes", min=1, max=MAX_MINUTES, help="Resolutions per minute over this window."
    ),
    as_json: bool = JSON_OPTION,
    iterations: int | None = typer.Option(
        None, "--iterations", min=1, hidden=True, help="Stop --watch after this many reads."
    ),
) -> None:
    """Pending half messages by age, resolutions per minute, check-backs, producers,
    consumer groups and storage: the status page's figures. --watch keeps them live
    (Ctrl-C ends it)."""
    try:
        _status(ctx, watch, interval, minutes, as_json, iterations)
    except (KeyboardInterrupt, asyncio.CancelledError):
        # Ctrl-C is how --watch ends: not an error (a second one, while the
        # first waits for a read to finish, ends it at once).
        raise typer.Exit(0) from None


@run_async
async def _status(
    ctx: typer.Context,
    watch: bool,
    interval: float,
    minutes: int,
    as_json: bool,
    iterations: int | None,
) -> None:
    async with open_core(ctx) as core:
        if not watch:
            overview = await core.overview.read(minutes)
            if as_json:
                print_json(OverviewOut.of(overview).model_dump(mode="json"))
            else:
                console.print(render(overview, width=console.width))
            return
        with _stopped_by_ctrl_c() as stop:
            reads = _reads(core, minutes, interval, iterations, stop)
            if as_json:
                # One JSON document per line and read, for scripts that follow it.
                async for overview in reads:
                    typer.echo(json.dumps(OverviewOut.of(overview).model_dump(mode="json")))
                return
            footer = f"read every {interval:g} s; Ctrl-C to stop"
            with Live(console=console, auto_refresh=False) as live:
                async for overview in reads:
                    live.update(render(overview, width=console.width, footer=footer), refresh=True)


@contextmanager
def _stopped_by_ctrl_c() -> Iterator[asyncio.Event]:
    """An event Ctrl-C sets: the watch ends between two reads, never cancelling one
    mid-query (the pool then closes with every connection idle). A second Ctrl-C
    cancels the command at once."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    command = asyncio.current_task()

    def on_ctrl_c() -> None:
        if stop.is_set() and command is not None:
            command.cancel()
        stop.set()

    try:
        loop.add_signal_handler(signal.SIGINT, on_ctrl_c)
        installed = True
    except (ValueError, RuntimeError):  # not the main thread: Ctrl-C stays KeyboardInterrupt
        installed = False
    try:
        yield stop
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGINT)


async def _reads(
    core: Coordinator, minutes: int, interval: float, iterations: int | None, stop: asyncio.Event
) -> AsyncIterator[Overview]:
    """An overview every `interval` seconds, `iterations` times (None: until stopped)."""
    done = 0
    while not stop.is_set():
        yield await core.overview.read(minutes)
        done += 1
        if iterations is not None and done >= iterations:
            return
        with suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval)


def _source(group: ProducerGroupCount) -> str:
    """Whether the group's own database settles it, and how its last check went."""
    if group.check_source_mode is None:
        return "-"
    said = f"database ({group.check_source_mode}): "
    if group.check_source_checked_at is None:
        return said + "not checked yet"
    return said + ("ok" if group.check_source_ok else f"failed: {group.check_source_error}")
