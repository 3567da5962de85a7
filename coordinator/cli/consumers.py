"""`coordinator subscriptions` and `coordinator dlq list | requeue`: consumer groups."""

from __future__ import annotations

from datetime import datetime

import typer
from rich.table import Table

from coordinator.cli.common import EXIT_USAGE, console, fail, open_core, run_async
from coordinator.domain.delivery import ConsumerLag

dlq_app = typer.Typer(
    help="List and requeue dead letters (messages out of delivery attempts).",
    no_args_is_help=True,
)


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S") if at else "-"


def lag_table(lags: list[ConsumerLag]) -> Table:
    """Per consumer group and topic: unacked, in flight, dead letters (also in `status`)."""
    table = Table(title="Consumer lag")
    for column in ("consumer group", "topic"):
        table.add_column(column)
    for column in ("lag", "in flight", "dead letters", "oldest pending"):
        table.add_column(column, justify="right")
    for lag in lags:
        table.add_row(
            lag.consumer_group,
            lag.topic,
            f"{lag.lag:,}",
            f"{lag.in_flight:,}",
            f"{lag.dead_letters:,}",
            _when(lag.oldest_pending_at),
        )
    return table


@run_async
async def subscriptions(
    ctx: typer.Context,
    group: str | None = typer.Option(None, "--group", "-g", help="Only this consumer group."),
) -> None:
    """Consumer groups' subscriptions with their lag."""
    async with open_core(ctx) as core:
        found = await core.delivery.subscriptions(group)
        lags = {(x.consumer_group, x.topic): x for x in await core.delivery.lag(group)}
    table = Table(title="Subscriptions")
    for column in ("consumer group", "topic", "expression", "fifo"):
        table.add_column(column)
    for column in ("max attempts", "lag", "in flight", "dead letters"):
        table.add_column(column, justify="right")
    table.add_column("since")
    for s in found:
        lag = lags.get((s.consumer_group, s.topic))
        table.add_row(
            s.consumer_group,
            s.topic,
            s.expression,
            "yes" if s.fifo else "no",
            str(s.max_delivery_attempts),
            f"{lag.lag:,}" if lag else "0",
            f"{lag.in_flight:,}" if lag else "0",
            f"{lag.dead_letters:,}" if lag else "0",
            _when(s.created_at),
        )
    if not found:
        console.print("No subscriptions.")
    else:
        console.print(table)


@dlq_app.command("list")
@run_async
async def list_dead_letters(
    ctx: typer.Context,
    group: str | None = typer.Option(None, "--group", "-g", help="Only this consumer group."),
    topic: str | None = typer.Option(None, "--topic", "-t", help="Only this topic."),
    limit: int = typer.Option(100, "--limit", help="At most this many, oldest first."),
) -> None:
    """Dead letters, oldest first."""
    async with open_core(ctx) as core:
        letters = await core.delivery.dead_letters(group, topic=topic, limit=limit)
    if not letters:
        console.print("No dead letters.")
        return
    table = Table(title="Dead letters")
    for column in ("id", "consumer group", "topic", "offset", "message id", "tags"):
        table.add_column(column)
    table.add_column("attempts", justify="right")
    table.add_column("dead since")
    table.add_column("body")
    for d in letters:
        try:
            body = d.body.decode()
            body = body if len(body) <= 40 else body[:40] + "..."
        except UnicodeDecodeError:
            body = f"<{len(d.body)} bytes>"
        table.add_row(
            str(d.id),
            d.consumer_group,
            d.topic,
            str(d.offset),
            d.message_id,
            d.tags or "-",
            str(d.attempts),
            _when(d.dead_at),
            body,
        )
    console.print(table)


@dlq_app.command("requeue")
@run_async
async def requeue(
    ctx: typer.Context,
    ident: int | None = typer.Argument(None, metavar="[ID]", help="The dead letter's id."),
    group: str | None = typer.Option(None, "--group", "-g", help="The consumer group."),
    topic: str | None = typer.Option(None, "--topic", "-t", help="With --all: only this topic."),
    requeue_all: bool = typer.Option(False, "--all", help="Every dead letter of --group."),
) -> None:
    """Deliver dead letters again (fresh attempt count): one by ID, or --group G --all."""
    if (ident is None) == (not requeue_all):
        raise fail("give either a dead letter ID or --group GROUP --all", EXIT_USAGE)
    if requeue_all and group is None:
        raise fail("--all needs --group GROUP", EXIT_USAGE)
    if ident is not None and topic is not None:
        raise fail("--topic goes with --all", EXIT_USAGE)
    async with open_core(ctx) as core:
        if ident is not None:
            await core.delivery.requeue_dead_letter(ident, group)
            count = 1
        else:
            assert group is not None
            count = await core.delivery.requeue_dead_letters(group, topic=topic)
    console.print(f"requeued {count} dead letter{'s' if count != 1 else ''}")
