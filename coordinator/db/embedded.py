"""The embedded default: a PostgreSQL server from the `pgserver` package.

With no database URL configured the coordinator keeps its data in a local
directory and runs its own server there. pgserver shares one server between
all processes using the same directory and stops it when the last one exits;
it also works as root (it runs postgres as a system user it creates).
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import psycopg
from psycopg import sql

from coordinator.db.queries import execute_sync, query

log = logging.getLogger(__name__)

DATABASE_NAME = "coordinator"

# Keep the server objects alive for the life of the process: pgserver stops a
# server when its last handle is cleaned up.
_servers: dict[Path, object] = {}


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
