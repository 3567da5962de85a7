"""`coordinator status` and `coordinator tx show ID`: readable tables."""

from __future__ import annotations

from datetime import timedelta

import typer
from rich.table import Table

from coordinator.cli.common import console, open_core, run_async
from coordinator.cli.consumers import lag_table
from coordinator.core import Coordinator
from coordinator.domain.errors import NotFound
from coordinator.domain.messages import MessageRecord

tx_app = typer.Typer(help="Inspect one transaction or message.", no_args_is_help=True)


def _age(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"


@run_async
async def status(ctx: typer.Context) -> None:
    """Counts by state, producer group and topic, and the oldest pending transaction."""
    async with open_core(ctx) as core:
        current = await core.status()
        lags = await core.delivery.lag()
    totals: dict[str, int] = {}
    for c in current.counts:
        totals[c.state.value] = totals.get(c.state.value, 0) + c.count
    by_state = Table(title="Messages by state")
    by_state.add_column("state")
    by_state.add_column("messages", justify="right")
    for state, count in sorted(totals.items()):
        by_state.add_row(state, f"{count:,}")
    if not totals:
        by_state.add_row("(none)", "0")
    console.print(by_state)

    detail = Table(title="By producer group and topic")
    for column in ("producer group", "topic", "state"):
        detail.add_column(column)
    detail.add_column("messages", justify="right")
    detail.add_column("oldest", justify="right")
    for c in current.counts:
        detail.add_row(
            c.producer_group or "-",
            c.topic,
            c.state.value,
            f"{c.count:,}",
            c.oldest_born_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
    console.print(detail)
    oldest = current.oldest_pending
    if oldest is None:
        console.print("No pending transactions.")
    else:
        console.print(
            f"{current.pending_total:,} pending; oldest: transaction "
            f"{oldest.transaction_id} ({oldest.producer_group} -> {oldest.topic}), "
            f"age {_age(oldest.age)}, checked {oldest.check_count} times",
            highlight=False,
        )
    if lags:
        console.print(lag_table(lags))


@tx_app.command("show")
@run_async
async def show(
    ctx: typer.Context,
    ident: str = typer.Argument(..., metavar="ID", help="Offset, transaction id or message id."),
) -> None:
    """One message with its history of state changes."""
    async with open_core(ctx) as core:
        record = await _find(core, ident)
    _print_record(record)


async def _find(core: Coordinator, ident: str) -> MessageRecord:
    if ident.isdigit():
        return await core.get_message(offset=int(ident))
    try:
        return await core.get_message(transaction_id=ident)
    except NotFound:
        pass
    try:
        return await core.get_message(message_id=ident)
    except NotFound:
        raise NotFound(f"no message with offset, transaction id or message id {ident!r}") from None


def _print_record(record: MessageRecord) -> None:
    fields = Table(show_header=False, title=f"Message {record.message_id}")
    fields.add_column("field", style="bold")
    fields.add_column("value")
    try:
        body = record.body.decode()
        body = body if len(body) <= 200 else body[:200] + "..."
    except UnicodeDecodeError:
        body = f"<{len(record.body)} bytes, not UTF-8>"
    rows = [
        ("offset", str(record.offset)),
        ("transaction id", record.transaction_id or "-"),
        ("kind", record.kind.value),
        ("state", record.state.value),
        ("producer group", record.producer_group or "-"),
        ("topic", record.topic),
        ("tags", record.tags or "-"),
        ("keys", " ".join(record.keys) or "-"),
        ("properties", ", ".join(f"{k}={v}" for k, v in record.properties.items()) or "-"),
        ("body", body),
        ("check count", str(record.check_count)),
        ("born", record.born_at.isoformat(timespec="seconds")),
        (
            "next check",
            record.next_check_at.isoformat(timespec="seconds") if record.next_check_at else "-",
        ),
        (
            "resolved",
            record.resolved_at.isoformat(timespec="seconds") if record.resolved_at else "-",
        ),
        ("resolved by", record.resolution_source.value if record.resolution_source else "-"),
    ]
    for name, value in rows:
        fields.add_row(name, value)
    console.print(fields)
    history = Table(title="History")
    for column in ("at", "source", "from", "to", "detail"):
        history.add_column(column)
    for entry in record.history:
        history.add_row(
            entry.at.isoformat(timespec="milliseconds"),
            entry.source.value,
            entry.from_state.value if entry.from_state else "-",
            entry.to_state.value,
            entry.detail or "",
        )
    console.print(history)
