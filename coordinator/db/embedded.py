"""The embedded default: a PostgreSQL server from the `pgserver` package.

With no database URL configured the coordinator keeps its data in a local
directory and runs its own server there. pgserver shares one server between
all processes using the same directory and stops it (pg_ctl's fast shutdown,
a clean one) when the last one exits; it also works as root (it runs
postgres as a system user it creates).

pgserver knows which processes use a server by a list of their pids in the
data directory, from which each takes itself at exit. A process that was
killed (SIGKILL, OOM) never does, so the server would outlive the last real
user: a coordinator that joins a server forgets the dead pids first.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import psycopg
from psycopg import sql

from coordinator.db.queries import execute_sync, query

if TYPE_CHECKING:
    from pgserver.postgres_server import PostgresServer

log = logging.getLogger(__name__)

DATABASE_NAME = "coordinator"

# Keep the server objects alive for the life of the process: pgserver stops a
# server when its last handle is cleaned up.
_servers: dict[Path, PostgresServer] = {}


def start_embedded(data_dir: Path, database: str = DATABASE_NAME) -> str:
    """Start (or join) the embedded server under data_dir; return a libpq URL."""
    with warnings.catch_warnings():
        # platformdirs warns that XDG_RUNTIME_DIR is unset on servers and
        # containers; pgserver then uses /tmp, which is what we want.
        warnings.simplefilter("ignore")
        import pgserver  # imported here: only the embedded default needs it

    pgdata = (data_dir / "pgdata").resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = _servers.get(pgdata)
    if server is None:
        log.info("starting embedded PostgreSQL in %s", pgdata)
        forget_dead_users(pgdata)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = pgserver.get_server(pgdata, cleanup_mode="stop")
        _servers[pgdata] = server
    admin_url = server.get_uri("postgres")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = execute_sync(conn, "database_exists", {"name": database}).fetchone()
        if not exists:
            # A database name is an identifier, which no query parameter can carry.
            create = sql.SQL(query("create_database")).format(name=sql.Identifier(database))
            conn.execute(create)
    return server.get_uri(database)


def forget_dead_users(pgdata: Path) -> list[int]:
    """Take the pids of processes that are gone off pgserver's list of the server's users.

    Returns the pids taken off. Done under pgserver's own lock, which every
    process takes to join or leave a server (pgserver 0.1's internals: its
    version is pinned below 0.2).
    """
    from pgserver.postgres_server import PostgresServer
    from pgserver.utils import DiskList

    users = DiskList(pgdata / ".handle_pids.json")
    with PostgresServer._lock:
        if not users.path.exists():
            return []
        dead = [pid for pid in users.get() if not _running(pid)]
        for pid in dead:
            users.get_and_remove(pid)
    if dead:
        log.info("the embedded PostgreSQL's users %s are gone (killed): forgotten", dead)
    return dead


def _running(pid: int) -> bool:
    try:
        # psutil has no type information: its status is a str
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def embedded_exists(data_dir: Path) -> bool:
    """Whether data_dir holds an embedded server's cluster (initdb ran there)."""
    return (data_dir / "pgdata" / "PG_VERSION").is_file()


def bundled_program(name: str) -> Path | None:
    """A PostgreSQL client program pgserver ships (psql, pg_dump, ...), if installed.

    Found next to the package rather than by importing it: importing pgserver
    costs time and warnings a command that only needs the path need not pay.
    """
    from importlib.util import find_spec

    spec = find_spec("pgserver")
    if spec is None or spec.origin is None:
        return None
    program = Path(spec.origin).parent / "pginstall" / "bin" / name
    return program if program.is_file() else None
