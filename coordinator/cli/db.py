"""`coordinator db upgrade | downgrade | current | url`: Alembic from the package, and the URL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer

from coordinator.cli.common import (
    EXIT_USAGE,
    JSON_OPTION,
    console,
    database_errors,
    database_url,
    err_console,
    fail,
    print_json,
    settings_from,
)
from coordinator.db import migrate
from coordinator.db.urls import out_of_schema, redact

app = typer.Typer(
    help="Apply or inspect the schema migrations; the database's URL.", no_args_is_help=True
)

# A relative revision (-1) starts with a dash: without this click would take
# it for an option it does not know.
REVISION_COMMAND = {"ignore_unknown_options": True}


@app.command(context_settings=REVISION_COMMAND)
def upgrade(
    ctx: typer.Context,
    revision: str = typer.Argument("heads", help="Target revision, e.g. +1 [default: latest]."),
) -> None:
    """Migrate the database up to REVISION (default: the latest); creates the embedded one."""
    url = database_url(ctx, create=True)
    with database_errors(settings_from(ctx)), _revision(revision):
        migrate.upgrade(url, revision, schema=settings_from(ctx).database_schema)
    _print_revision(ctx, url)


@app.command(context_settings=REVISION_COMMAND)
def downgrade(
    ctx: typer.Context,
    revision: str = typer.Argument(..., help="Target revision, e.g. -1 or base."),
) -> None:
    """Migrate the database down to REVISION (base removes every table)."""
    url = database_url(ctx)
    with database_errors(settings_from(ctx)), _revision(revision):
        migrate.downgrade(url, revision, schema=settings_from(ctx).database_schema)
    _print_revision(ctx, url)


@contextmanager
def _revision(revision: str) -> Iterator[None]:
    try:
        yield
    except migrate.RevisionError as error:
        raise fail(
            f"cannot migrate to revision {revision!r}: {error} (give a revision id, heads, "
            "base, +N or -N; `coordinator db current` shows the database's)",
            EXIT_USAGE,
        ) from None


def _print_revision(ctx: typer.Context, url: str) -> None:
    with database_errors(settings_from(ctx)):
        revisions = migrate.current_revisions(url, schema=settings_from(ctx).database_schema)
    console.print(f"database at revision {', '.join(revisions) or 'base'}")


@app.command()
def current(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """Show the database's revision and the latest one."""
    url = database_url(ctx)
    with database_errors(settings_from(ctx)):
        current = migrate.current_revisions(url, schema=settings_from(ctx).database_schema)
    heads = migrate.head_revisions()
    up_to_date = set(current) == set(heads)
    # The database as given: the schema's search_path is the coordinator's own addition.
    shown = redact(out_of_schema(url))
    if as_json:
        print_json(
            {
                "database": shown,
                "current": list(current),
                "latest": list(heads),
                "up_to_date": up_to_date,
            }
        )
        return
    console.print(f"database: {shown}", highlight=False, soft_wrap=True)
    console.print(f"current:  {', '.join(current) or 'base (empty)'}")
    console.print(f"latest:   {', '.join(heads)}")
    if not up_to_date:
        console.print("[yellow]not up to date: run `coordinator db upgrade`[/yellow]")


@app.command()
def url(
    ctx: typer.Context,
    show_password: bool = typer.Option(
        False, "--show-password", help="Print the password too (hidden otherwise)."
    ),
) -> None:
    """Print the database's URL, for psql or psycopg (the embedded server's socket as host)."""
    found = database_url(ctx)
    # Plain stdout, one line, so that $(coordinator db url) works.
    typer.echo(found if show_password else redact(found))
    if not settings_from(ctx).database_url:
        err_console.print(
            "The embedded server runs while a coordinator process uses it (`coordinator "
            "serve`, `coordinator psql`): connect while one runs.",
            highlight=False,
            soft_wrap=True,
        )
