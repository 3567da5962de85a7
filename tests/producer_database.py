"""A producer's own database for the database check-back tests, reached over loopback TCP.

The tests' PostgreSQL listens on a Unix socket only, and a check source is a
TCP URL: `LoopbackProxy` forwards 127.0.0.1:PORT to the socket, from a
thread of its own (so a node in another thread can use it too). `silent_port`
is a socket that accepts connections and never answers; `closed_port` one
nothing listens on. Every socket and thread is closed when its block ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from tests.conftest import url_for

BARRIER_DDL = (
    "CREATE TABLE {table} (transaction_id text PRIMARY KEY, "
    "outcome text NOT NULL CHECK (outcome IN ('committed', 'rolled_back')), "
    "created_at timestamptz NOT NULL DEFAULT now())"
)


class LoopbackProxy:
    """127.0.0.1:port -> the Unix socket of the tests' PostgreSQL."""

    def __init__(self, socket_path: str) -> None:
        self._socket_path = socket_path
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="loopback-proxy", daemon=True)
        self.port = 0

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._forward, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        self._loop.run_until_complete(server.wait_closed())
        tasks = asyncio.all_tasks(self._loop)
        for task in tasks:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self._loop.close()

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(self._socket_path)
        except OSError:
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def __enter__(self) -> LoopbackProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the loopback proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@contextlib.contextmanager
def silent_port() -> Iterator[int]:
    """A port whose connections are accepted (by the kernel) and never answered."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


def closed_port() -> int:
    """A port nothing listens on (it was just free)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass(frozen=True)
class ProducerDatabase:
    name: str
    direct_url: str  # over the Unix socket, for the test's own connections
    user: str

    def tcp_url(self, port: int, *, user: str | None = None, password: str | None = None) -> str:
        auth = (user or self.user) + (f":{password}" if password else "")
        return f"postgresql://{auth}@127.0.0.1:{port}/{self.name}"

    def outcome(self, transaction_id: str, table: str = "coordinator_barrier") -> str | None:
        with psycopg.connect(self.direct_url) as conn:
            row = conn.execute(
                f"SELECT outcome FROM {table} WHERE transaction_id = %s", (transaction_id,)
            ).fetchone()
        return None if row is None else row[0]

    def mark_committed(self, *transaction_ids: str) -> None:
        with psycopg.connect(self.direct_url) as conn:
            for tid in transaction_ids:
                conn.execute(
                    "INSERT INTO coordinator_barrier (transaction_id, outcome) "
                    "VALUES (%s, 'committed')",
                    (tid,),
                )


def _info(server: Any) -> Any:
    """host, port, user, password: of a test's connection, or of the session's server."""
    return getattr(server, "info", server)


@contextlib.contextmanager
def producer_database(server: Any) -> Iterator[ProducerDatabase]:
    """A database of its own on the tests' server, with a barrier table; dropped at the end."""
    info = _info(server)
    name = f"producer_{uuid.uuid4().hex[:12]}"
    admin = url_for(info.host, info.port, info.user, "postgres", info.password or None)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        direct = url_for(info.host, info.port, info.user, name, info.password or None)
        with psycopg.connect(direct) as conn:
            conn.execute(BARRIER_DDL.format(table="coordinator_barrier"))
        yield ProducerDatabase(name, direct, info.user)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def socket_path(server: Any) -> str:
    info = _info(server)
    return str(Path(info.host) / f".s.PGSQL.{info.port}")
