"""`coordinator config show`: the effective settings and where each came from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from pydantic import SecretStr

from coordinator.cli.common import JSON_OPTION, console, loaded_settings, print_json
from coordinator.cli.sources import LoadedSettings
from coordinator.cli.tables import Column, print_table
from coordinator.config import DATABASE_URLS, Settings
from coordinator.db.urls import redact

app = typer.Typer(help="The effective configuration.", no_args_is_help=True)

HIDDEN = "***"


@app.command("show")
def show(ctx: typer.Context, as_json: bool = JSON_OPTION) -> None:
    """Every setting's value and where it came from: default, file, environment or flag.

    Secrets are hidden (the passwords of database_url and read_database_url,
    check_push_secret).
    """
    loaded = loaded_settings(ctx)
    if as_json:
        print_json(settings_json(loaded))
        return
    where = loaded.config_file or "none (--config FILE or COORDINATOR_CONFIG)"
    console.print(f"config file: {where}", highlight=False, soft_wrap=True)
    rows = [
        [name, _text(_shown(name, value)), str(loaded.origin(name))]
        for name, value in _values(loaded.settings)
    ]
    print_table(
        console,
        "Settings",
        [Column("setting", whole=True), Column("value"), Column("from")],
        rows,
    )


def settings_json(loaded: LoadedSettings) -> dict[str, Any]:
    return {
        "config_file": str(loaded.config_file) if loaded.config_file else None,
        "settings": {
            name: {
                "value": _json_value(_shown(name, value)),
                "source": loaded.origin(name).source.value,
                "from": loaded.origin(name).where,
            }
            for name, value in _values(loaded.settings)
        },
    }


def _values(settings: Settings) -> list[tuple[str, Any]]:
    return [(name, getattr(settings, name)) for name in type(settings).model_fields]


def _shown(name: str, value: Any) -> Any:
    if isinstance(value, SecretStr):
        return HIDDEN
    if name in DATABASE_URLS and value:
        return redact(value)
    return value


def _json_value(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value


def _text(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ", ".join(map(str, value)) or "none"
    return str(value)
