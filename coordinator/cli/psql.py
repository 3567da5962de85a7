"""`coordinator psql [ARGS...]`: psql on the coordinator's database."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import typer

from coordinator.cli.common import EXIT_USAGE, database_url, fail, settings_from
from coordinator.db.embedded import bundled_program
from coordinator.db.urls import psql_arguments

# Every argument this command does not know is psql's.
PASS_ARGUMENTS_ON = {"allow_extra_args": True, "ignore_unknown_options": True}


def psql(ctx: typer.Context) -> None:
    """Open psql on the coordinator's database; ARGS go to psql (e.g. -c 'SELECT 1').

    The embedded server gets the psql pgserver ships, and runs as long as
    psql does; an external one gets the psql on PATH (else the bundled one).
    Put -- before ARGS that this command would take for its own (--help).
    """
    url = database_url(ctx)
    program = _program(external=bool(settings_from(ctx).database_url))
    connection, environment = psql_arguments(url)
    # psql handles Ctrl-C itself (it cancels the running query); this process
    # must not die of it and take the embedded server away under psql.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        finished = subprocess.run(
            [str(program), *connection, *ctx.args], env={**os.environ, **environment}
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    raise typer.Exit(finished.returncode)


def _program(*, external: bool) -> Path:
    bundled = bundled_program("psql")
    on_path = shutil.which("psql")
    # An external server may be newer than the bundled psql (PostgreSQL 16):
    # the user's own psql matches it better.
    choices = [on_path, bundled] if external else [bundled, on_path]
    for choice in choices:
        if choice:
            return Path(choice)
    raise fail("no psql found: install PostgreSQL's client (psql) or pgserver", EXIT_USAGE)
