"""`coordinator tokens create | list | revoke`: the API's bearer tokens.

A token is shown once, when it is created: the database keeps only its hash
(core/tokens.py). Serving coordinators pick up a change at once (NOTIFY) or
within token_refresh_seconds.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import typer

from coordinator.cli.common import (
    EXIT_USAGE,
    console,
    err_console,
    fail,
    open_core,
    run_async,
    settings_from,
)
from coordinator.cli.tables import Column, print_table
from coordinator.core.tokens import TokenInfo
from coordinator.domain.access import Grants
from coordinator.domain.errors import InvalidMessage

app = typer.Typer(
    help="Create, list and revoke the API's bearer tokens.",
    no_args_is_help=True,
)

JSON_OPTION = typer.Option(False, "--json", help="Print JSON instead of text.")


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S") if at else "-"


def _patterns(grants: Grants) -> list[tuple[str, tuple[str, ...]]]:
    return [
        ("produce topics", grants.produce_topics),
        ("producer groups", grants.producer_groups),
        ("consume groups", grants.consume_groups),
        ("consume topics", grants.consume_topics),
    ]


def token_json(info: TokenInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "permissions": list(info.grants.permissions),
        **info.grants.by_field(),
        "created_at": info.created_at.isoformat(),
        "revoked_at": info.revoked_at.isoformat() if info.revoked_at else None,
    }


def _print_json(value: object) -> None:
    # Plain stdout: rich would wrap long lines and colour the JSON.
    typer.echo(json.dumps(value, indent=2))


@app.command("create")
@run_async
async def create(
    ctx: typer.Context,
    name: str = typer.Argument(..., metavar="NAME", help="A name to list and revoke the token by."),
    produce_topics: list[str] = typer.Option(
        [], "--produce-topic", metavar="PATTERN", help="Topics it may send to (repeatable)."
    ),
    producer_groups: list[str] = typer.Option(
        [],
        "--producer-group",
        metavar="PATTERN",
        help="Producer groups it may send, end and answer check-backs as (repeatable).",
    ),
    consume_groups: list[str] = typer.Option(
        [],
        "--consume-group",
        metavar="PATTERN",
        help="Consumer groups it may receive, ack and subscribe as (repeatable).",
    ),
    consume_topics: list[str] = typer.Option(
        [], "--consume-topic", metavar="PATTERN", help="Topics it may subscribe to (repeatable)."
    ),
    admin: bool = typer.Option(
        False, "--admin", help="Everything: operator reads, any group, dead-letter requeue."
    ),
    metrics: bool = typer.Option(False, "--metrics", help="Read /metrics."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Create a token and print it (once: it is not stored, only its hash).

    Patterns are names or shell-style globs: orders, order-*, *. Produce
    needs topics and producer groups; consume needs consumer groups and topics.
    """
    grants = Grants(
        produce_topics=tuple(produce_topics),
        producer_groups=tuple(producer_groups),
        consume_groups=tuple(consume_groups),
        consume_topics=tuple(consume_topics),
        admin=admin,
        metrics=metrics,
    )
    # The first token may come before the first `serve`: it may create the database.
    async with open_core(ctx, create=True) as core:
        try:
            created = await core.tokens.create(name, grants)
        except InvalidMessage as error:
            raise fail(error.message, EXIT_USAGE) from None
        live = [info for info in await core.tokens.list() if info.revoked_at is None]
    notice = "Keep it now: it is not shown again (the coordinator stores only its hash)."
    if as_json:
        _print_json({**token_json(created.info), "token": created.token})
        err_console.print(notice, highlight=False, soft_wrap=True)
    else:
        permissions = ", ".join(created.info.grants.permissions)
        console.print(f"created token {name!r} ({permissions}):", highlight=False, soft_wrap=True)
        # Plain print: nothing may wrap or restyle the token itself.
        typer.echo(f"\n    {created.token}\n")
        console.print(notice, highlight=False, soft_wrap=True)
    if len(live) == 1:
        err_console.print(
            "This is the only live token: from now on every request to the coordinator "
            "needs a token (only /health stays open).",
            highlight=False,
            soft_wrap=True,
        )


@app.command("list")
@run_async
async def list_tokens(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """Every token with its permissions, revoked ones too (never the tokens themselves)."""
    async with open_core(ctx) as core:
        found = await core.tokens.list()
    if as_json:
        _print_json([token_json(info) for info in found])
        return
    if not found:
        console.print("No tokens: a coordinator on loopback (or --insecure) serves without them.")
        return
    rows = [
        [
            info.name,
            ", ".join(info.grants.permissions),
            "\n".join(
                f"{what}: {', '.join(values)}" for what, values in _patterns(info.grants) if values
            )
            or "-",
            _when(info.created_at),
            _when(info.revoked_at),
        ]
        for info in found
    ]
    print_table(
        console,
        "API tokens",
        [
            Column("name", whole=True),
            Column("permissions"),
            Column("patterns"),
            Column("created"),
            Column("revoked"),
        ],
        rows,
    )


@app.command("revoke")
@run_async
async def revoke(
    ctx: typer.Context, name: str = typer.Argument(..., metavar="NAME", help="The token's name.")
) -> None:
    """Revoke a token: servers refuse it from their next reread of the tokens."""
    async with open_core(ctx) as core:
        await core.tokens.revoke(name)
        live = [info for info in await core.tokens.list() if info.revoked_at is None]
    refresh = settings_from(ctx).token_refresh_seconds
    console.print(
        f"revoked token {name!r}: serving coordinators refuse it at once, "
        f"or within {refresh:g} s where they missed the notification",
        highlight=False,
        soft_wrap=True,
    )
    if not live:
        err_console.print(
            "No live token is left: a coordinator listening on loopback (or started "
            "--insecure) serves without tokens again; any other refuses every request.",
            highlight=False,
            soft_wrap=True,
        )
