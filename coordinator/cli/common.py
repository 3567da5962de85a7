"""What every CLI command shares: settings from flags and environment, errors as sentences."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from functools import wraps
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import typer
from rich.console import Console

from coordinator.config import Settings
from coordinator.domain.errors import CoordinatorError, NotFound

console = Console()
err_console = Console(stderr=True)

P = ParamSpec("P")
T = TypeVar("T")

EXIT_NOT_FOUND = 3
EXIT_REFUSED = 4
EXIT_UNAVAILABLE = 5


def settings_from(ctx: typer.Context) -> Settings:
    return ctx.ensure_object(dict)["settings"]


def make_settings(database_url: str | None, data_dir: Path | None, **overrides: Any) -> Settings:
    values = {k: v for k, v in overrides.items() if v is not None}
    if database_url is not None:
        values["database_url"] = database_url
    if data_dir is not None:
        values["data_dir"] = data_dir
    return Settings(**values)


def fail(message: str, code: int = 1) -> typer.Exit:
    err_console.print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(code)


def run_async(func: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """Run an async command body; core errors become one sentence and an exit code."""

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
