"""`coordinator serve`: migrate the database, then serve HTTP."""

from __future__ import annotations

import os
import signal
from types import FrameType
from typing import Any

import typer
import uvicorn

from coordinator.cli.common import console, settings_with_flags
from coordinator.config import Settings
from coordinator.db.ready import ready_database
from coordinator.db.urls import redact
from coordinator.http import create_app
from coordinator.http.protocol import CoalescingHttpToolsProtocol


# Every parameter but `workers` is named after the setting it overrides.
def serve(
    ctx: typer.Context,
    host: str | None = typer.Option(None, help="Listen address [default: 127.0.0.1]."),
    port: int | None = typer.Option(None, help="Listen port [default: 8080]."),
    transaction_timeout_seconds: float | None = typer.Option(
        None, "--transaction-timeout", help="Seconds before the first check-back [default: 6]."
    ),
    check_interval_seconds: float | None = typer.Option(
        None, "--check-interval", help="Seconds between check-backs [default: 60]."
    ),
    check_max: int | None = typer.Option(
        None, "--check-max", help="Check-backs before a message is discarded [default: 15]."
    ),
    retention_hours: float | None = typer.Option(
        None, "--retention-hours", help="Hours before an unresolved message expires [default: 72]."
    ),
    max_body_bytes: int | None = typer.Option(
        None, "--max-body-bytes", help="Largest message body [default: 4194304]."
    ),
    workers: int = typer.Option(
        1,
        min=1,
        help="Server processes sharing the port; all run check-backs (SKIP LOCKED keeps "
        "them apart).",
    ),
    reject_transactional_messages: bool | None = typer.Option(
        None,
        "--reject-transactional-messages/--accept-transactional-messages",
        help="Refuse half messages with HTTP 403 [default: accept].",
    ),
) -> None:
    """Start the coordinator (embedded PostgreSQL unless a database URL is set)."""
    settings = settings_with_flags(ctx, not_settings={"workers"})
    url = ready_database(settings)
    where = redact(url) if settings.database_url else f"embedded, data in {settings.data_dir}"
    console.print(f"database: {where}", highlight=False)
    console.print(
        f"coordinator listening on http://{settings.host}:{settings.port} (API docs at /docs)",
        highlight=False,
    )
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again
    # with the handler it found. The default handler would end the process
    # without running atexit hooks, and the embedded server's hook stops
    # Postgres: exit as on SIGINT instead, so nothing is left running.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if workers == 1:
        uvicorn.run(create_app(url, settings), **_server_options(settings))
        return
    # Worker processes import the app by name and read their settings back
    # from the environment, with the database already resolved and migrated.
    os.environ.update(settings.with_overrides(database_url=url).to_environment())
    uvicorn.run(
        "coordinator.http.app:app_from_environment",
        factory=True,
        workers=workers,
        **_server_options(settings),
    )


def _server_options(settings: Settings) -> dict[str, Any]:
    return {
        "host": settings.host,
        "port": settings.port,
        # Access lines are INFO, below log_level: access_log=False also skips
        # building each one, which the hot routes would otherwise pay for.
        "log_level": "warning",
        "access_log": False,
        "http": CoalescingHttpToolsProtocol,
        # The coordinator never reads the client's address, which is all that
        # uvicorn's proxy-header middleware would parse every request for.
        "proxy_headers": False,
    }


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)
