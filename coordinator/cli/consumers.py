"""`coordinator subscriptions` and `coordinator dlq list | requeue`: consumer groups."""

from __future__ import annotations

from datetime import datetime

import typer

from coordinator.cli.common import (
    EXIT_USAGE,
    JSON_OPTION,
    console,
    fail,
    open_core,
    print_json,
    run_async,
)
from coordinator.cli.tables import Column, print_table
from coordinator.views.consumers import (
    ConsumerLagOut,
    DeadLetterOut,
    DeadLettersOut,
    SubscriptionOut,
)

dlq_app = typer.Typer(
    help="List and requeue dead letters (messages out of delivery attempts).",
    no_args_is_help=True,
)


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S") if at else "-"


@run_async
async def subscriptions(
    ctx: typer.Context,
    group: str | None = typer.Option(None, "--group", "-g", help="Only this consumer group."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Consumer groups' subscriptions with their lag."""
    async with open_core(ctx) as core:
        found = await core.delivery.subscriptions(group)
        lag_list = await core.delivery.lag(group)
    if as_json:
        # The answers of GET .../subscriptions and GET .../lag, side by side.
        print_json(
            {
                "subscriptions": [SubscriptionOut.of(s).model_dump(mode="json") for s in found],
                "lag": [ConsumerLagOut.of(x).model_dump(mode="json") for x in lag_list],
            }
        )
        return
    if not found:
        console.print("No subscriptions.")
        return
    lags = {(x.consumer_group, x.topic): x for x in lag_list}
    rows = []
    for s in found:
        lag = lags.get((s.consumer_group, s.topic))
        rows.append(
            [
                s.consumer_group,
                s.topic,
                s.filter_type.value,
                s.expression,
                "yes" if s.fifo else "no",
                str(s.max_delivery_attempts),
                f"{lag.lag:,}" if lag else "0",
                f"{lag.in_flight:,}" if lag else "0",
                f"{lag.dead_letters:,}" if lag else "0",
                _when(s.created_at),
            ]
        )
    print_table(
        console,
        "Subscriptions",
        [
            Column("consumer group", whole=True),
            Column("topic", whole=True),
            Column("filter"),
            Column("expression"),
            Column("fifo"),
            Column("max attempts", right=True),
            Column("lag", right=True),
            Column("in flight", right=True),
            Column("dead letters", right=True),
            Column("since"),
        ],
        rows,
    )


@dlq_app.command("list")
@run_async
async def list_dead_letters(
    ctx: typer.Context,
    group: str | None = typer.Option(None, "--group", "-g", help="Only this consumer group."),
    topic: str | None = typer.Option(None, "--topic", "-t", help="Only this topic."),
    limit: int = typer.Option(100, "--limit", help="At most this many, oldest first."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Dead letters, oldest first."""
    async with open_core(ctx) as core:
        letters = await core.delivery.dead_letters(group, topic=topic, limit=limit)
    if as_json:
        # The answer of GET .../dead-letters: whole bodies, as base64 and text.
        print_json(
            DeadLettersOut(dead_letters=[DeadLetterOut.of(d) for d in letters]).model_dump(
                mode="json"
            )
        )
        return
    if not letters:
        console.print("No dead letters.")
        return
    rows = []
    for d in letters:
        try:
            body = d.body.decode()
            body = body if len(body) <= 40 else body[:40] + "..."
        except UnicodeDecodeError:
            body = f"<{len(d.body)} bytes>"
        rows.append(
            [
                str(d.id),
                d.consumer_group,
                d.topic,
                d.message_id,
                d.tags or "-",
                str(d.attempts),
                _when(d.dead_at),
                body,
            ]
        )
    print_table(
        console,
        "Dead letters",
        [
            Column("id", whole=True, right=True),
            Column("consumer group", whole=True),
            Column("topic", whole=True),
            Column("message id", whole=True),
            Column("tags"),
            Column("attempts", right=True),
            Column("dead since"),
            Column("body"),
        ],
        rows,
    )


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
