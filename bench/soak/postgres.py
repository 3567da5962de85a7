"""The soak's own PostgreSQL, from pgserver's bundled binaries, that chaos may stop.

The postmaster runs as a child of the soak (in its own session, sent SIGQUIT,
Postgres's immediate shutdown, should the soak die), listening on a UNIX
socket in the soak's directory only. Faults stop it with `pg_ctl stop -m
fast` or `-m immediate` (a crash: the next start replays the WAL) and start
it again on the same socket, so every URL stays valid across restarts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import warnings
from pathlib import Path

import psycopg
from psycopg import sql

from bench.soak import children

PORT = 5432  # names the socket file; a TCP listener (on loopback) only when asked for
SUPERUSER = "postgres"
# pgserver's choice too: postgres refuses to run as root.
SYSTEM_USER_WHEN_ROOT = "pgserver"


def _bin_dir() -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
        import pgserver

    return Path(pgserver.__file__).parent / "pginstall" / "bin"


class Postgres:
    def __init__(self, root: Path, *, tcp_port: int | None = None) -> None:
        self.root = root
        # A database check source is a TCP URL the coordinator checks like a
        # check URL: the exactly-once soak opens loopback for it.
        self.tcp_port = tcp_port
        self.pgdata = root / "pgdata"
        self.socket_dir = root / "pgsocket"
        self.log = root / "postgres.log"
        self.bin = _bin_dir()
        self.user = _system_user()
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, database: str = SUPERUSER) -> str:
        return f"postgresql://{SUPERUSER}@/{database}?host={self.socket_dir}&port={self.port}"

    def tcp_url(self, database: str) -> str:
        """The database over loopback TCP (only with `tcp_port`)."""
        assert self.tcp_port is not None, "this server listens on its UNIX socket only"
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.tcp_port}/{database}"

    @property
    def port(self) -> int:
        return self.tcp_port or PORT

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def init(self) -> None:
        self.root.chmod(0o755)  # the postgres user traverses it to its files
        self.socket_dir.mkdir()
        self.pgdata.mkdir()
        self._own(self.socket_dir, self.pgdata)
        if self.user is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                from pgserver.utils import ensure_prefix_permissions

            ensure_prefix_permissions(self.pgdata)
        self._run(
            "initdb",
            "-D",
            str(self.pgdata),
            "--auth=trust",
            "--encoding=utf8",
            "-U",
            SUPERUSER,
        )

    def start(self, *, timeout_seconds: float = 60.0) -> None:
        """Start the postmaster and wait until it accepts connections."""
        self.process = children.spawn(
            [
                str(self.bin / "postgres"),
                "-D",
                str(self.pgdata),
                "-k",
                str(self.socket_dir),
                "-h",
                # By default no TCP listener: the socket is the only way in.
                "127.0.0.1" if self.tcp_port else "",
                "-p",
                str(self.port),
                "-c",
                "max_connections=200",
            ],
            log=self.log,
            user=self.user,
            on_parent_death=signal.SIGQUIT,
        )
        deadline = time.monotonic() + timeout_seconds
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited at start; see {self.log}")
            try:
                with psycopg.connect(self.url(), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self, mode: str = "fast") -> None:
        """`pg_ctl stop -m MODE`: fast ends sessions and checkpoints, immediate crashes."""
        if not self.running:
            return
        self._run("pg_ctl", "stop", "-D", str(self.pgdata), "-m", mode, "-w", "-t", "60")
        assert self.process is not None
        self.process.wait(timeout=30)

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def close(self) -> None:
        """Stop for good, whatever state it is in."""
        if self.process is None:
            return
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.stop("fast")
        if self.process.poll() is None:
            children.kill(self.process)

    def _run(self, program: str, *args: str) -> None:
        subprocess.run(
            [str(self.bin / program), *args],
            check=True,
            capture_output=True,
            user=self.user,
            timeout=120,
        )

    def _own(self, *paths: Path) -> None:
        if self.user is not None:
            for path in paths:
                shutil.chown(path, self.user, self.user)


def _system_user() -> str | None:
    if os.geteuid() != 0:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver.utils import (
            ensure_folder_permissions,
            ensure_prefix_permissions,
            ensure_user_exists,
        )

    ensure_user_exists(SYSTEM_USER_WHEN_ROOT)
    # What pgserver does before it runs its binaries as that user.
    bin_dir = _bin_dir()
    ensure_prefix_permissions(bin_dir)
    readable = 0o044
    ensure_folder_permissions(bin_dir, 0o011 | readable)
    ensure_folder_permissions(bin_dir.parent / "lib", readable)
    return SYSTEM_USER_WHEN_ROOT
