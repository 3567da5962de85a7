"""A PostgreSQL primary and a streaming standby of it, for tests that read from a standby.

Built from pgserver's PostgreSQL binaries: a primary initialized in a
directory of its own, listening on 127.0.0.1 (and a UNIX socket in its data
directory), and a hot standby made from it with `pg_basebackup -R`, which
streams its WAL over TCP and answers reads on a port of its own. The standby
lags on demand: `pause_replay()` has it keep receiving WAL but apply none
(pg_wal_replay_pause), so what the primary commits meanwhile is not there
yet; `resume_replay()` catches it up.

Run as root, PostgreSQL runs as pgserver's unprivileged user. Both servers
are stopped and their directory removed when the block ends, however it
ends; every wait is bounded.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.server import free_port
from coordinator.db import migrate
from tests.processes import postgres_stopped_at_the_end
from tests.search_path import give_test_search_path

USER = "postgres"  # the servers' superuser (initdb -U)
WAIT_SECONDS = 60.0


def _commands() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver import _commands

    return _commands


def _system_user(base: Path) -> str | None:
    """The user PostgreSQL runs as: pgserver's own when this is root (postgres refuses root)."""
    if os.geteuid() != 0:
        return None
    from pgserver.utils import ensure_prefix_permissions, ensure_user_exists

    name = "pgserver"
    entry = ensure_user_exists(name)
    assert entry is not None
    ensure_prefix_permissions(base)
    # The servers' user makes both data directories (pg_basebackup the standby's).
    os.chown(base, entry.pw_uid, entry.pw_gid)
    return name


@dataclass(frozen=True)
class StreamingStandby:
    """The primary and its standby, both on 127.0.0.1."""

    base: Path
    primary_port: int
    standby_port: int
    system_user: str | None

    def primary_url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.primary_port}/{dbname}"

    def standby_url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.standby_port}/{dbname}"

    def migrated_database(self, dbname: str) -> str:
        """A new database at the head revision on the primary, replayed by the standby; its
        primary URL."""
        with psycopg.connect(self.primary_url(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        url = self.primary_url(dbname)
        migrate.upgrade(url)
        give_test_search_path(url)
        self.wait_for_replay()
        return url

    def pause_replay(self) -> None:
        """The standby stops applying WAL (it still receives it) until resume_replay()."""
        with psycopg.connect(self.standby_url(), autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_pause()")
            _wait_until(
                lambda: (
                    conn.execute("SELECT pg_get_wal_replay_pause_state()").fetchone() == ("paused",)
                ),
                "the standby's replay to pause",
            )

    def resume_replay(self) -> None:
        with psycopg.connect(self.standby_url(), autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_resume()")

    def wait_for_replay(self) -> None:
        """Until the standby has applied everything the primary has written so far."""
        self._wait_for("pg_last_wal_replay_lsn()", "the standby to replay the primary's WAL")

    def wait_for_receipt(self) -> None:
        """Until the standby has received (not necessarily applied) all the primary wrote."""
        self._wait_for("pg_last_wal_receive_lsn()", "the standby to receive the primary's WAL")

    def _wait_for(self, standby_position: str, what: str) -> None:
        with psycopg.connect(self.primary_url(), autocommit=True) as primary:
            (written,) = primary.execute("SELECT pg_current_wal_lsn()::text").fetchone()  # type: ignore[misc]
        reached = sql.SQL("SELECT {} >= %s::pg_lsn").format(sql.SQL(standby_position))
        with psycopg.connect(self.standby_url(), autocommit=True) as standby:
            _wait_until(lambda: standby.execute(reached, (written,)).fetchone() == (True,), what)

    def _start(self, pgdata: Path, port: int) -> None:
        _commands().pg_ctl(
            [
                "-w",
                "-o",
                "-h 127.0.0.1",
                "-o",
                f"-p {port}",
                "-o",
                f"-k {pgdata}",
                "-l",
                str(pgdata / "server.log"),  # pgdata is the server user's to write
                "start",
            ],
            pgdata=pgdata,
            user=self.system_user,
            timeout=WAIT_SECONDS,
        )

    def _stop(self, pgdata: Path) -> None:
        if (pgdata / "postmaster.pid").exists():
            _commands().pg_ctl(
                ["-w", "-m", "fast", "stop"],
                pgdata=pgdata,
                user=self.system_user,
                timeout=WAIT_SECONDS,
            )


def _wait_until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {WAIT_SECONDS:g} s for {what}")
        time.sleep(0.05)


@contextmanager
def streaming_standby(prefix: str = "coordinator-test-standby-") -> Iterator[StreamingStandby]:
    """A primary and a streaming hot standby of it, both stopped at the end."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    primary, standby = base / "primary", base / "standby"
    try:
        # Whatever happens below, no server on these directories outlives the block.
        with postgres_stopped_at_the_end(base):
            pair = StreamingStandby(base, free_port(), free_port(), _system_user(base))
            commands = _commands()
            user = pair.system_user
            commands.initdb(
                ["--auth=trust", "--encoding=utf8", "-U", USER],
                pgdata=primary,
                user=user,
                timeout=WAIT_SECONDS,
            )
            try:
                # initdb's pg_hba.conf lets loopback connect for replication (trust).
                pair._start(primary, pair.primary_port)
                commands.pg_basebackup(
                    [
                        "-h",
                        "127.0.0.1",
                        "-p",
                        str(pair.primary_port),
                        "-U",
                        USER,
                        "-D",
                        str(standby),
                        "-R",  # standby.signal, and primary_conninfo to stream from the primary
                        "--checkpoint=fast",
                    ],
                    user=user,
                    timeout=WAIT_SECONDS,
                )
                try:
                    pair._start(standby, pair.standby_port)
                    _wait_for_streaming(pair)
                    yield pair
                finally:
                    with suppress(Exception):
                        pair.resume_replay()  # a paused standby still stops, but not waiting
                    pair._stop(standby)
            finally:
                pair._stop(primary)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def database_on_both(pair: StreamingStandby, prefix: str) -> Iterator[tuple[str, str]]:
    """A migrated database of a test's own: its primary URL and its standby URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    primary = pair.migrated_database(name)
    try:
        yield primary, pair.standby_url(name)
    finally:
        pair.resume_replay()  # whatever the test left paused


def _wait_for_streaming(pair: StreamingStandby) -> None:
    with psycopg.connect(pair.standby_url(), autocommit=True) as standby:
        assert standby.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
        _wait_until(
            lambda: (
                standby.execute("SELECT status FROM pg_stat_wal_receiver").fetchone()
                == ("streaming",)
            ),
            "the standby to stream from the primary",
        )
