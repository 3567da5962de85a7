"""`coordinator producers check-source set|show|remove`: a group's database answers its checks.

The URL never comes on the command line, where the process list and shell
history would show its password: it is read from an environment variable
(`--database-url-env VAR`) or from standard input (`--database-url-stdin`).
The command encrypts the password with this node's check source key
(`check_source_key`, or the key file): run it with the same settings as the
servers. Nothing printed carries the password (`***` in its place).
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime

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
from coordinator.cli.formats import age
from coordinator.domain.check_sources import DEFAULT_BARRIER_TABLE, CheckSource
from coordinator.views.producers import CheckSourceOut

app = typer.Typer(
    help="A producer group's own database answers its check-backs (the barrier table).",
    no_args_is_help=True,
)

GROUP_ARGUMENT = typer.Argument(..., metavar="GROUP", help="The producer group.")


def _url(variable: str | None, from_stdin: bool) -> str:
    if (variable is None) == (not from_stdin):
        raise fail("give the URL with --database-url-env VAR or --database-url-stdin", EXIT_USAGE)
    if from_stdin:
        url = sys.stdin.readline().strip()
    else:
        assert variable is not None
        url = os.environ.get(variable, "").strip()
        if not url:
            raise fail(f"the environment variable {variable} is unset or empty", EXIT_USAGE)
    if not url:
        raise fail("no URL on standard input", EXIT_USAGE)
    return url


def describe(source: CheckSource) -> str:
    """The last check as a few words: when, and whether it worked."""
    if source.last_check_at is None:
        return "not checked yet"
    when = f"{age(datetime.now(UTC) - source.last_check_at)} ago"
    if source.last_ok:
        return f"ok {when}"
    return f"failed {when} ({source.consecutive_failures} in a row): {source.last_error}"


def _print(source: CheckSource, as_json: bool, done: str | None = None) -> None:
    if as_json:
        print_json(CheckSourceOut.of(source).model_dump(mode="json"))
        return
    if done:
        console.print(done, highlight=False, soft_wrap=True)
    console.print(
        f"{source.producer_group}: {source.url} table {source.barrier_table}, "
        f"mode {source.mode.value}; last check: {describe(source)}",
        highlight=False,
        soft_wrap=True,
    )


@app.command("set")
@run_async
async def set_source(
    ctx: typer.Context,
    group: str = GROUP_ARGUMENT,
    database_url_env: str | None = typer.Option(
        None, "--database-url-env", metavar="VAR", help="Read the libpq URL from this variable."
    ),
    database_url_stdin: bool = typer.Option(
        False, "--database-url-stdin", help="Read the libpq URL from the first line of stdin."
    ),
    barrier_table: str = typer.Option(
        DEFAULT_BARRIER_TABLE, "--barrier-table", help="The barrier table (or schema.table)."
    ),
    mode: str = typer.Option(
        "fallback",
        "--mode",
        help="fallback: only while no instance of the group is live; only: every check.",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Register (or replace) GROUP's check source."""
    url = _url(database_url_env, database_url_stdin)
    async with open_core(ctx) as core:
        source = await core.check_sources.set(group, url, barrier_table=barrier_table, mode=mode)
    _print(source, as_json, done=f"check source of {group} registered")


@app.command("show")
@run_async
async def show(
    ctx: typer.Context, group: str = GROUP_ARGUMENT, as_json: bool = JSON_OPTION
) -> None:
    """GROUP's check source (password masked) and how its last check went."""
    async with open_core(ctx) as core:
        source = await core.check_sources.get(group)
    _print(source, as_json)


@app.command("remove")
@run_async
async def remove(ctx: typer.Context, group: str = GROUP_ARGUMENT) -> None:
    """Remove GROUP's check source: live instances answer its check-backs again."""
    async with open_core(ctx) as core:
        removed = await core.check_sources.remove(group)
    said = "removed" if removed else "had none; nothing changed"
    console.print(f"check source of {group} {said}", highlight=False, soft_wrap=True)
