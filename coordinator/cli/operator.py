"""Operator commands: `coordinator tx recheck|commit|rollback ID` and `coordinator producers`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import typer

from coordinator.cli.check_sources import describe
from coordinator.cli.common import (
    JSON_OPTION,
    console,
    open_core,
    print_json,
    run_async,
    settings_from,
)
from coordinator.cli.formats import age
from coordinator.cli.inspect import PRODUCER_GROUP_OPTION, TOPIC_OPTION, _find
from coordinator.cli.tables import Column, print_table
from coordinator.domain.check_sources import CheckSource
from coordinator.domain.checkback import OperatorResult
from coordinator.domain.states import Resolution
from coordinator.views.producers import CheckSourceOut, ProducerOut, ProducersOut

ID_ARGUMENT = typer.Argument(..., metavar="ID", help="Offset, transaction id or message id.")


def _describe(result: OperatorResult) -> str:
    if result.transaction_id:
        return f"transaction {result.transaction_id} (offset {result.offset})"
    return f"message {result.message_id} (offset {result.offset})"


@run_async
async def recheck(
    ctx: typer.Context,
    ident: str = ID_ARGUMENT,
    producer_group: str | None = PRODUCER_GROUP_OPTION,
    topic: str | None = TOPIC_OPTION,
) -> None:
    """Re-arm a discarded message: prepared again, check count reset, checked back now."""
    async with open_core(ctx) as core:
        record = await _find(core, ident, producer_group=producer_group, topic=topic)
        result = await core.checkback.operator.recheck(record.offset)
    console.print(
        f"{_describe(result)} re-armed: prepared again with a fresh check budget; "
        "it is checked back at the next round",
        highlight=False,
        soft_wrap=True,
    )


def _resolver(resolution: Resolution, done: str) -> Callable[..., None]:
    @run_async
    async def resolve(
        ctx: typer.Context,
        ident: str = ID_ARGUMENT,
        producer_group: str | None = PRODUCER_GROUP_OPTION,
        topic: str | None = TOPIC_OPTION,
    ) -> None:
        async with open_core(ctx) as core:
            record = await _find(core, ident, producer_group=producer_group, topic=topic)
            result = await core.checkback.operator.resolve(record.offset, resolution)
        if result.changed:
            console.print(
                f"{_describe(result)} {done} by the operator (was {result.previous_state.value})",
                highlight=False,
                soft_wrap=True,
            )
        else:
            console.print(
                f"{_describe(result)} is already {result.state.value}; nothing changed",
                highlight=False,
                soft_wrap=True,
            )

    resolve.__doc__ = (
        f"Resolve a prepared or discarded message by hand: {done} (recorded as operator)."
    )
    return resolve


# What an operator can decide by hand (UNKNOWN decides nothing), each a
# command named after the resolution: `tx commit`, `tx rollback`.
_DONE_BY_HAND = {Resolution.COMMIT: "committed", Resolution.ROLLBACK: "rolled back"}


def add_tx_commands(tx_app: typer.Typer) -> None:
    tx_app.command("recheck")(recheck)
    for resolution, done in _DONE_BY_HAND.items():
        tx_app.command(resolution.value)(_resolver(resolution, done))


@run_async
async def producers(
    ctx: typer.Context,
    group: str | None = typer.Option(None, "--group", "-g", help="Only this producer group."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Registered producer instances: how they get check-backs and whether they are live.

    Groups settled by their own database (`producers check-source`) are listed too.
    """
    if ctx.invoked_subcommand is not None:
        return  # `producers check-source ...`
    async with open_core(ctx) as core:
        found = await core.checkback.producers.instances(group)
        sources = await core.check_sources.list(group)
    ttl = settings_from(ctx).producer_ttl_seconds
    if as_json:
        # The answer of GET /v1/producers.
        print_json(
            ProducersOut(
                producers=[ProducerOut.of(p, ttl_seconds=ttl) for p in found],
                check_sources=[CheckSourceOut.of(s) for s in sources],
            ).model_dump(mode="json")
        )
        return
    _print_sources(sources)
    if not found:
        console.print("No producer instances registered.")
        return
    now = datetime.now(UTC)
    print_table(
        console,
        "Producer instances",
        [
            Column("producer group", whole=True),
            Column("instance", whole=True),
            Column("mode"),
            Column("check URL"),
            Column("live"),
            Column("last seen"),
            Column("registered"),
        ],
        [
            [
                p.producer_group,
                p.instance_id,
                p.mode.value,
                p.check_url or "-",
                "yes" if p.live else "no",
                f"{age(now - p.last_seen_at)} ago",
                p.registered_at.isoformat(timespec="seconds"),
            ]
            for p in found
        ],
    )
    live = sum(p.live for p in found)
    console.print(
        f"{live} of {len(found)} instances live (heard from within {ttl:g} s)",
        highlight=False,
        soft_wrap=True,
    )


def _print_sources(sources: list[CheckSource]) -> None:
    if not sources:
        return
    print_table(
        console,
        "Settled by their own database (check sources)",
        [
            Column("producer group", whole=True),
            Column("mode"),
            Column("database"),
            Column("barrier table"),
            Column("last check"),
        ],
        [[s.producer_group, s.mode.value, s.url, s.barrier_table, describe(s)] for s in sources],
    )
