"""An embedded PostgreSQL (pgserver's binaries) that also listens on 127.0.0.1.

pgserver listens on a UNIX socket only; Spark's JDBC source needs TCP. This
starts a pgserver server, then restarts it with a loopback port as well, so
the same data can be read both ways. Stopped (and its directory removed) at
the end, also when the caller fails.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, quote, urlparse

import psycopg
from psycopg import sql


@dataclass(frozen=True)
class TcpPostgres:
    socket_dir: str
    port: int
    user: str

    def socket_url(self, dbname: str) -> str:
        return f"postgresql://{quote(self.user)}@/{dbname}?host={quote(self.socket_dir)}&port={self.port}"

    def tcp_url(self, dbname: str) -> str:
        return f"postgresql://{quote(self.user)}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, dbname: str) -> None:
        with psycopg.connect(self.socket_url("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def tcp_postgres(prefix: str = "coordinator-tcp-pg-") -> Iterator[TcpPostgres]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
        from pgserver._commands import pg_ctl

    data_dir = Path(tempfile.mkdtemp(prefix=prefix))
    pgdata = data_dir / "pgdata"
    server = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # Stopped here, not by pgserver: it knows only the process it started.
            server = pgserver.get_server(pgdata, cleanup_mode=None)
        uri = urlparse(server.get_uri())
        socket_dir = parse_qs(uri.query)["host"][0]
        user = server.system_user  # type: ignore[attr-defined]
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user, timeout=60)
        port = _free_port()
        pg_ctl(
            [
                "-w",
                "-o",
                "-h 127.0.0.1",
                "-o",
                f"-p {port}",
                "-o",
                f"-k {socket_dir}",
                "-l",
                str(pgdata / "tcp.log"),  # pgdata is the server user's to write
                "start",
            ],
            pgdata=pgdata,
            user=user,
            timeout=60,
        )
        yield TcpPostgres(socket_dir, port, uri.username or "postgres")
    finally:
        try:
            if (pgdata / "postmaster.pid").exists():
                user = server.system_user  # type: ignore[union-attr]
                pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user, timeout=60)
        finally:
            if server is not None:
                server.cleanup()  # type: ignore[attr-defined]
            shutil.rmtree(data_dir, ignore_errors=True)
