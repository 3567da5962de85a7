"""What every CLI command shares: settings, the database and the core, errors as sentences."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Coroutine
from contextlib import asynccontextmanager
from functools import wraps
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import psycopg
import sqlalchemy.exc
import typer
from rich.console import Console

from coordinator.config import Settings, SettingsError
from coordinator.core import Coordinator
from coordinator.db.ready import ready_database
from coordinator.domain.errors import CoordinatorError, NotFound

console = Console()
err_console = Console(stderr=True)

P = ParamSpec("P")
T = TypeVar("T")

EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_REFUSED = 4
EXIT_UNAVAILABLE = 5


def settings_from(ctx: typer.Context) -> Settings:
    return ctx.ensure_object(dict)["settings"]


def make_settings(database_url: str | None, data_dir: Path | None) -> Settings:
    """Settings from the environment and the global options; a wrong value is a sentence."""
    given = {"database_url": database_url, "data_dir": data_dir}
    try:
        return Settings.from_environment(**{k: v for k, v in given.items() if v is not None})
    except SettingsError as error:
        raise fail(str(error), EXIT_USAGE) from None


def settings_with_flags(ctx: typer.Context, *, not_settings: Collection[str] = ()) -> Settings:
    """The settings with the command's flags applied, each flag named after its setting.

    A flag left out (None) keeps the setting; a wrong value is a usage error
    (exit 2) that names the flag, like a value of the wrong type.
    """
    flags = {name: value for name, value in ctx.params.items() if name not in not_settings}
    try:
        return settings_from(ctx).with_overrides(**flags)
    except SettingsError as error:
        names = {p.name: p.opts[0] for p in ctx.command.params if p.name and p.opts}
        raise typer.BadParameter(error.explain(names), ctx) from None


def ready_url(ctx: typer.Context) -> str:
    """The command's database, migrated (and started first if it is the embedded one)."""
    return ready_url_for(settings_from(ctx))


def ready_url_for(settings: Settings) -> str:
    """ready_url for settings a command adjusted (its own flags); exit 5 if unreachable."""
    try:
        return ready_database(settings)
    # Migrating through SQLAlchemy wraps psycopg's error in one of its own.
    except (psycopg.OperationalError, sqlalchemy.exc.OperationalError) as error:
        reason = getattr(error, "orig", None) or error
        raise fail(f"cannot reach the database: {reason}", EXIT_UNAVAILABLE) from None


@asynccontextmanager
async def open_core(ctx: typer.Context) -> AsyncIterator[Coordinator]:
    """The core on the command's database, closed on exit."""
    async with Coordinator.connect(ready_url(ctx), settings_from(ctx)) as core:
        yield core


def fail(message: str, code: int = 1) -> typer.Exit:
    # soft_wrap: a sentence stays one line in logs and pipes, where rich would
    # otherwise break it at 80 columns.
    err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def run_async(func: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """Run an async command; core errors become one sentence and an exit code."""

    @wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return asyncio.run(_awaited(func(*args, **kwargs)))
        except NotFound as error:
            raise fail(error.message, EXIT_NOT_FOUND) from None
        except CoordinatorError as error:
            raise fail(error.message, EXIT_REFUSED) from None

    return wrapper


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable
