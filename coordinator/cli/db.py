"""`coordinator db upgrade | downgrade | current`: Alembic from the package."""

from __future__ import annotations

import typer

from coordinator.cli.common import console, settings_from
from coordinator.db import migrate
from coordinator.db.ready import database_url_for
from coordinator.db.urls import redact

app = typer.Typer(help="Apply or inspect the schema migrations.", no_args_is_help=True)


@app.command()
def upgrade(
    ctx: typer.Context,
    revision: str = typer.Argument("heads", help="Target revision."),
) -> None:
    """Migrate the database up to REVISION (default: the latest)."""
    url = database_url_for(settings_from(ctx))
    migrate.upgrade(url, revision)
    _print_revision(url)


@app.command()
def downgrade(
    ctx: typer.Context,
    revision: str = typer.Argument(..., help="Target revision, e.g. -1 or base."),
) -> None:
    """Migrate the database down to REVISION (base removes every table)."""
    url = database_url_for(settings_from(ctx))
    migrate.downgrade(url, revision)
    _print_revision(url)


def _print_revision(url: str) -> None:
    console.print(f"database at revision {', '.join(migrate.current_revisions(url)) or 'base'}")


@app.command()
def current(ctx: typer.Context) -> None:
    """Show the database's revision and the latest one."""
    url = database_url_for(settings_from(ctx))
    current = migrate.current_revisions(url)
    heads = migrate.head_revisions()
    console.print(f"database: {redact(url)}", highlight=False)
    console.print(f"current:  {', '.join(current) or 'base (empty)'}")
    console.print(f"latest:   {', '.join(heads)}")
    if set(current) != set(heads):
        console.print("[yellow]not up to date: run `coordinator db upgrade`[/yellow]")
