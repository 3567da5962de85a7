"""What every CLI command shares: settings, the database and the core, errors as sentences."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import wraps
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import psycopg
import sqlalchemy.exc
import typer
from rich.console import Console
from rich.text import Text

from coordinator.cli.sources import ConfigFileError, LoadedSettings, load_settings
from coordinator.config import Settings, SettingsError
from coordinator.core import Coordinator
from coordinator.db.migrate import RevisionError
from coordinator.db.ready import (
    NoEmbeddedDatabase,
    NotMigrated,
    database_url_for,
    describe_database,
    migrated_database,
    ready_database,
)
from coordinator.domain.errors import CoordinatorError, NotFound

console = Console()
err_console = Console(stderr=True)

P = ParamSpec("P")
T = TypeVar("T")

EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_REFUSED = 4
EXIT_UNAVAILABLE = 5
EXIT_CANNOT_LISTEN = 6
# The database is not at this coordinator's revision (the pipeline's code too).
EXIT_SCHEMA = 8

# The options of `coordinator` itself that are settings, by the flag users write.
GLOBAL_FLAGS = {
    "database_url": "--database-url",
    "read_database_url": "--read-database-url",
    "data_dir": "--data-dir",
}

JSON_OPTION = typer.Option(False, "--json", help="Print JSON instead of a table.")


def cli_state(ctx: typer.Context) -> dict[str, Any]:
    """What the options of `coordinator` (before or after the command) left for the command."""
    return ctx.ensure_object(dict)


def remember_global_flag(ctx: typer.Context, name: str, value: Any) -> None:
    if value is not None:
        cli_state(ctx).setdefault("global_flags", {})[name] = value


def loaded_settings(ctx: typer.Context) -> LoadedSettings:
    """The settings with where each came from, read once, when a command first needs them.

    Not before: the options after the command (`serve --data-dir X`) are
    parsed only after `coordinator`'s own callback has run.
    """
    state = cli_state(ctx)
    if "loaded" not in state:
        try:
            state["loaded"] = load_settings(
                state.get("config_file"), state.get("global_flags", {}), GLOBAL_FLAGS
            )
        except (SettingsError, ConfigFileError) as error:
            raise fail(str(error), EXIT_USAGE) from None
    return state["loaded"]


def settings_from(ctx: typer.Context) -> Settings:
    state = cli_state(ctx)
    if "settings" not in state:  # `pipeline --database-url` may have set its own
        state["settings"] = loaded_settings(ctx).settings
    return state["settings"]


def verbose(ctx: typer.Context) -> bool:
    return bool(cli_state(ctx).get("verbose"))


def make_settings(database_url: str | None, data_dir: Path | None) -> Settings:
    """Settings from the environment and these options; a wrong value is a sentence."""
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
    names = {p.name: p.opts[0] for p in ctx.command.params if p.name and p.opts}
    try:
        loaded = loaded_settings(ctx).with_flags(flags, names)
    except SettingsError as error:
        raise typer.BadParameter(error.explain(names), ctx) from None
    state = cli_state(ctx)
    state["loaded"], state["settings"] = loaded, loaded.settings
    return loaded.settings


def migrated_url(ctx: typer.Context, *, create: bool = False) -> str:
    """The command's database, refused with a sentence unless it is migrated already.

    The commands that read or act on existing state never migrate: only
    `coordinator db upgrade` and `coordinator serve` do.
    """
    settings = settings_from(ctx)
    if verbose(ctx):
        say_database(settings)
    with database_errors(settings):
        return migrated_database(settings, create=create)


def ready_url(ctx: typer.Context, *, create: bool = False) -> str:
    """The command's database, migrated (the embedded one started first).

    Only with create=True may an embedded data directory without a database
    get a new one; otherwise that is refused with a sentence (exit 5).
    """
    return ready_url_for(settings_from(ctx), create=create, announce=verbose(ctx))


def ready_url_for(settings: Settings, *, create: bool = False, announce: bool = False) -> str:
    """ready_url for settings a command adjusted (its own flags)."""
    if announce:
        say_database(settings)
    with database_errors(settings):
        return ready_database(settings, create=create)


def database_url(ctx: typer.Context, *, create: bool = False) -> str:
    """The command's database as it is: not migrated (for `db ...`, `psql`)."""
    settings = settings_from(ctx)
    if verbose(ctx):
        say_database(settings)
    with database_errors(settings):
        return database_url_for(settings, create=create)


def say_database(settings: Settings) -> None:
    err_console.print(f"database: {describe_database(settings)}", highlight=False, soft_wrap=True)


@contextmanager
def database_errors(settings: Settings) -> Iterator[None]:
    """A database that cannot be reached or found, or a bad revision, as one sentence."""
    try:
        yield
    # Migrating through SQLAlchemy wraps psycopg's error in one of its own.
    except (psycopg.OperationalError, sqlalchemy.exc.OperationalError) as error:
        reason = getattr(error, "orig", None) or error
        raise fail(
            f"cannot reach the database ({describe_database(settings)}): {one_line(reason)}",
            EXIT_UNAVAILABLE,
        ) from None
    except NoEmbeddedDatabase as error:
        raise fail(no_database_sentence(error.data_dir), EXIT_UNAVAILABLE) from None
    except RevisionError as error:
        raise fail(str(error), EXIT_USAGE) from None
    except NotMigrated as error:
        raise fail(str(error), EXIT_SCHEMA) from None
    except (psycopg.Error, sqlalchemy.exc.DBAPIError) as error:
        reason = getattr(error, "orig", None) or error
        raise fail(f"the database refused: {one_line(reason)}", 1) from None


def no_database_sentence(data_dir: Path) -> str:
    return (
        f"no coordinator database in {data_dir} (nothing was created there): point at yours "
        "with --data-dir DIR, COORDINATOR_DATA_DIR or data_dir in the --config file, or at a "
        "server with --database-url; `coordinator serve` or `coordinator db upgrade` creates one"
    )


def one_line(error: BaseException | str) -> str:
    """An error's text as one sentence: libpq's hints come on lines of their own."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return "; ".join([lines[0], *(line[:1].lower() + line[1:] for line in lines[1:])])


@asynccontextmanager
async def open_core(ctx: typer.Context, *, create: bool = False) -> AsyncIterator[Coordinator]:
    """The core on the command's database, closed on exit.

    Only with create=True (`tokens create`, which may come before the first
    `serve`) is the database migrated; otherwise one not migrated is refused.
    """
    url = ready_url(ctx, create=True) if create else migrated_url(ctx)
    async with Coordinator.connect(url, settings_from(ctx)) as core:
        yield core


def fail(message: str, code: int = 1) -> typer.Exit:
    # Text, not markup: sentences quote users' values, where brackets are
    # common ("[::1]", "coordinator[grpc]"). soft_wrap: a sentence stays one
    # line in logs and pipes, where rich would otherwise break it at 80 columns.
    line = Text.assemble(("error:", "red"), " ", message)
    err_console.print(line, highlight=False, soft_wrap=True)
    return typer.Exit(code)


def print_json(value: object) -> None:
    # Plain stdout: rich would wrap long lines and colour the JSON.
    typer.echo(json.dumps(value, indent=2))


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
        except psycopg.OperationalError as error:
            raise fail(f"lost the database: {one_line(error)}", EXIT_UNAVAILABLE) from None

    return wrapper


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable
