"""Test fixtures: a real PostgreSQL for every test, never a mock.

Unless pytest is pointed at a server (`--postgresql-host`, `--postgresql-port`,
...), one embedded PostgreSQL (pgserver) is started for the session. Migrations
are applied once to a template database; pytest-postgresql then gives every
test a fresh copy of it.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import tempfile
import threading
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlparse

import psycopg
import pytest
from pytest_postgresql import factories

from coordinator import logs
from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.db import migrate
from coordinator.domain.access import Grants
from coordinator.node import Node, configured_doors, running_node

# No process a test started may outlive the session (checked at its end).
from tests.leftovers import pytest_sessionfinish, pytest_sessionstart  # noqa: F401
from tests.search_path import TEST_SEARCH_PATH, give_test_search_path

_embedded: dict[str, object] = {}


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("postgresql_host", None):
        return  # an explicit server was given
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

        data_dir = Path(tempfile.mkdtemp(prefix="coordinator-test-pg-"))
        server = pgserver.get_server(data_dir / "pgdata", cleanup_mode="stop")
    uri = urlparse(server.get_uri())
    _embedded.update(server=server, data_dir=data_dir)
    config.option.postgresql_host = parse_qs(uri.query)["host"][0]
    config.option.postgresql_port = 5432
    config.option.postgresql_user = uri.username or "postgres"


def pytest_unconfigure(config: pytest.Config) -> None:
    server = _embedded.pop("server", None)
    if server is not None:
        server.cleanup()  # type: ignore[attr-defined]
        shutil.rmtree(_embedded.pop("data_dir"), ignore_errors=True)  # type: ignore[arg-type]


def url_for(host: str, port: int, user: str, dbname: str, password: str | None = None) -> str:
    auth = quote(user) + (f":{quote(password)}" if password else "")
    if host.startswith("/"):
        return f"postgresql://{auth}@/{dbname}?host={quote(host)}&port={port}"
    return f"postgresql://{auth}@{host}:{port}/{dbname}"


def _migrate_template(
    host: str, port: int, user: str, dbname: str, password: str | None, **_: object
) -> None:
    migrate.upgrade(url_for(host, port, user, dbname, password))


postgresql_proc = factories.postgresql_noproc(load=[_migrate_template])
postgresql = factories.postgresql("postgresql_proc")


@pytest.fixture
def database_url(postgresql: psycopg.Connection) -> str:
    """A freshly migrated database of this test's own."""
    info = postgresql.info
    url = url_for(info.host, info.port, info.user, info.dbname, info.password or None)
    give_test_search_path(url)
    postgresql.execute("SET search_path = " + TEST_SEARCH_PATH)
    postgresql.commit()
    return url


@pytest.fixture
def empty_database(postgresql: psycopg.Connection) -> Iterator[str]:
    """A database on the test server that nothing has touched."""
    info = postgresql.info
    name = f"empty_{uuid.uuid4().hex[:12]}"
    admin = url_for(info.host, info.port, info.user, "postgres", info.password or None)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url_for(info.host, info.port, info.user, name, info.password or None)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture
def db(postgresql: psycopg.Connection, database_url: str) -> psycopg.Connection:
    """A direct connection for asserting what the database holds."""
    postgresql.autocommit = True
    return postgresql


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """logs.configure() replaces the process's logging; put back what pytest had."""
    logs.flush_access_lines()  # another test's lines go where that test's went
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    access_level = logs.ACCESS.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logs.ACCESS.setLevel(access_level)
    logging.getLogger("apscheduler").setLevel(logging.NOTSET)


@pytest.fixture
def settings() -> Settings:
    return Settings(database_url=None)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def core(database_url: str, settings: Settings) -> AsyncIterator[Coordinator]:
    async with Coordinator.connect(database_url, settings) as coordinator:
        yield coordinator


class LiveServer:
    """A coordinator node serving real HTTP on a loopback port (and gRPC when
    settings.grpc_port is set), in a thread: the node `coordinator serve` runs."""

    def __init__(self, database_url: str, settings: Settings) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._database_url = database_url
        self._settings = settings
        self._node: Node | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def core(self) -> Coordinator:
        assert self._node is not None, "the node is not running"
        return self._node.core

    @property
    def doors(self) -> list[Any]:
        """The serving doors, HTTP's first."""
        assert self._node is not None, "the node is not running"
        return self._node.doors

    def _serve(self) -> None:
        async def serve() -> None:
            doors = configured_doors(self._settings, [self.sock])
            async with running_node(self._database_url, self._settings, doors) as node:
                self._node, self._loop = node, asyncio.get_running_loop()
                self._started.set()
                await node.serve()

        try:
            asyncio.run(serve())
        except BaseException as failure:
            self._failure = failure
        finally:
            self._started.set()

    def __enter__(self) -> LiveServer:
        self.thread.start()
        if not self._started.wait(timeout=30) or self._node is None:
            self.thread.join(timeout=15)
            self.sock.close()
            raise RuntimeError("the coordinator did not start") from self._failure
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._node is not None:
            self._loop.call_soon_threadsafe(self._node.stop)
        self.thread.join(timeout=15)
        self.sock.close()
        if self._failure is not None:
            raise RuntimeError("the coordinator failed while serving") from self._failure


@pytest.fixture
def live_server(database_url: str, settings: Settings) -> Iterator[LiveServer]:
    with LiveServer(database_url, settings) as server:
        yield server


@pytest.fixture
def issue_token(database_url: str) -> Callable[..., str]:
    """Creates an API token in this test's database and returns its secret.

    `issue_token("name", produce_topics=("orders",), ...)` takes the Grants
    fields. Synchronous (its own event loop), for tests that talk to a
    LiveServer: a server started afterwards knows the token from its start,
    a running one from the NOTIFY (or its next reread).
    """

    def issue(name: str, **grants: object) -> str:
        async def create() -> str:
            async with Coordinator.connect(database_url) as core:
                return (await core.tokens.create(name, Grants(**grants))).token  # type: ignore[arg-type]

        return asyncio.run(create())

    return issue


@pytest.fixture
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A HOME of the test's own for every process it starts.

    Importing the RocketMQ protocol modules (the coordinator's gRPC door and
    the official Python client do) creates ~/logs/rocketmq_python; the
    servers and clients a test starts inherit this environment. Modules that
    start them use it with `pytest.mark.usefixtures("own_home")`.
    """
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
