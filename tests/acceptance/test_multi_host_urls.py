"""A database URL naming several servers, in both forms libpq takes, works everywhere.

HA guides give `postgresql://u:p@h1:p1,h2:p2/db?target_session_attrs=read-write`;
libpq also takes `?host=h1,h2&port=p1,p2`. Here the first server named is
gone (nothing listens on its port) and the second is the database: every
command and the server reach it (libpq tries the hosts in turn) and no output
shows the password. Also: nodes started together on an empty database all
come up (their first migrations take turns).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from pathlib import Path

import httpx
import psycopg
import pytest

from bench.server import free_port
from bench.tcp_postgres import TcpPostgres, tcp_postgres
from coordinator.db import migrate
from tests.processes import (
    ServeProcess,
    clean_environment,
    coordinator_serve,
    settings_environment,
    stop_group,
)

pytestmark = pytest.mark.slow

PASSWORD = "s3cret-pw"
STARTUP_SECONDS = 90.0


@pytest.fixture(scope="module")
def server() -> Iterator[TcpPostgres]:
    with tcp_postgres() as postgres:
        yield postgres


def _gone_port() -> int:
    """A loopback port nothing listens on (a server that is down)."""
    return free_port()


def _hosts_form(server: TcpPostgres, dbname: str) -> str:
    return (
        f"postgresql://{server.user}:{PASSWORD}@127.0.0.1:{_gone_port()},127.0.0.1:{server.port}"
        f"/{dbname}?target_session_attrs=read-write&connect_timeout=2"
    )


def _query_form(server: TcpPostgres, dbname: str) -> str:
    return (
        f"postgresql://{server.user}:{PASSWORD}@/{dbname}?host=127.0.0.1,127.0.0.1"
        f"&port={_gone_port()},{server.port}&target_session_attrs=read-write"
        "&load_balance_hosts=disable&connect_timeout=2"
    )


FORMS = {"hosts": _hosts_form, "query": _query_form}


def _cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "coordinator", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_environment({}),
        check=False,
    )
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.mark.parametrize("form", FORMS)
def test_the_database_commands_reach_the_database_through_a_multi_host_url(
    server: TcpPostgres, form: str
) -> None:
    dbname = f"multi_{form}"
    server.create_database(dbname)
    url = FORMS[form](server, dbname)

    upgraded = _cli("--database-url", url, "db", "upgrade")
    current = _cli("--database-url", url, "db", "current", "--json")
    assert json.loads(current.stdout)["current"] == list(migrate.head_revisions())
    outputs = [upgraded, current]
    if form == "hosts":  # the query form reaches psql the same way (psql_arguments)
        shown = _cli("--database-url", url, "db", "url")
        assert "***" in shown.stdout
        psql = _cli("--database-url", url, "psql", "-tAc", "SELECT count(*) FROM messages")
        assert psql.stdout.strip() == "0"
        outputs += [shown, psql]
    for output in outputs:
        assert PASSWORD not in output.stdout + output.stderr


def test_a_node_its_status_and_the_pipeline_reach_the_database_through_a_multi_host_url(
    server: TcpPostgres, tmp_path: Path
) -> None:
    server.create_database("multi_node")
    url = _hosts_form(server, "multi_node")
    with coordinator_serve(url, tmp_path) as node:  # it migrates the database itself
        answer = httpx.post(
            f"{node.url}/v1/transactions",
            json={"topic": "orders", "producer_group": "svc", "body_text": "o-1"},
            timeout=30,
        )
        assert answer.status_code == 201, answer.text
        status = _cli("--database-url", url, "status", "--json")
        assert json.loads(status.stdout)["pending"] == 1
        logged = node.output()
    report = _cli(
        "--database-url", url, "pipeline", "report", "--engine", "in-process",
        "--output", str(tmp_path / "report"),
    )  # fmt: skip
    assert (tmp_path / "report").is_dir()
    for output in (status, report):
        assert PASSWORD not in output.stdout + output.stderr
    assert PASSWORD not in logged


def test_a_wrong_password_in_a_multi_host_url_is_one_sentence_without_the_password(
    server: TcpPostgres,
) -> None:
    url = _hosts_form(server, "postgres").replace(f"{server.user}:", "nobody:", 1)
    refused = _cli("--database-url", url, "db", "current", check=False)
    assert refused.returncode != 0
    assert "Traceback" not in refused.stderr
    assert PASSWORD not in refused.stdout + refused.stderr
    assert "***" in refused.stderr


def test_three_nodes_started_together_on_an_empty_database_all_come_up(
    server: TcpPostgres, tmp_path: Path
) -> None:
    server.create_database("together")
    url = f"postgresql://{server.user}@127.0.0.1:{server.port}/together"
    with ExitStack() as stack:
        nodes = [
            stack.enter_context(_Started(url, tmp_path, f"node-{n}", serve_args))
            for n, serve_args in enumerate([(), (), ("--workers", "2")])
        ]
        for node in nodes:
            _wait_healthy(node)
    with psycopg.connect(url) as conn:
        (versions,) = conn.execute("SELECT count(*) FROM coordinator.alembic_version").fetchone()
    assert versions == 1
    assert migrate.current_revisions(url) == migrate.head_revisions()


class _Started:
    """`coordinator serve` started without waiting for it: the three start at once."""

    def __init__(self, url: str, workdir: Path, name: str, serve_args: tuple[str, ...]) -> None:
        self.url, self.workdir, self.name, self.serve_args = url, workdir, name, serve_args
        self.node: ServeProcess | None = None

    def __enter__(self) -> ServeProcess:
        port = free_port()
        log = self.workdir / f"{self.name}.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "coordinator", "--database-url", self.url, "serve",
                 "--port", str(port), *self.serve_args],
                cwd=self.workdir,
                env=clean_environment(settings_environment()),
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        self.node = ServeProcess(f"http://127.0.0.1:{port}", process, log)
        return self.node

    def __exit__(self, *exc: object) -> None:
        assert self.node is not None
        stop_group(self.node.process)


def _wait_healthy(node: ServeProcess) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        if node.process.poll() is not None:
            raise AssertionError(f"coordinator serve exited:\n{node.output()}")
        with suppress(httpx.TransportError):
            if httpx.get(f"{node.url}/health", timeout=2).status_code == 200:
                return
        assert time.monotonic() < deadline, f"not healthy in time:\n{node.output()}"
        time.sleep(0.2)
