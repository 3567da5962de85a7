"""The newcomer's path with real processes: ports, the data directory, psql, a config file."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bench.server import free_port, serve_process
from coordinator.db.embedded import bundled_program
from tests.factories import GROUP, TOPIC
from tests.processes import clean_environment, embedded_data_dir, postgres_stopped_at_the_end

pytestmark = pytest.mark.slow


def coordinator(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`coordinator ARGS` run to its end (killed after a minute), no COORDINATOR_* inherited."""
    return subprocess.run(
        [sys.executable, "-m", "coordinator", *args],
        cwd=cwd,
        env=clean_environment(env or {}),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def busy_port() -> int:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


@pytest.mark.parametrize("flag", ["--port", "--grpc-port"])
def test_a_busy_port_is_a_sentence_before_postgres_starts(
    tmp_path: Path, busy_port: int, flag: str
) -> None:
    other = ["--port", str(free_port())] if flag == "--grpc-port" else []
    with postgres_stopped_at_the_end(tmp_path / ".coordinator" / "pgdata"):
        result = coordinator(tmp_path, "serve", flag, str(busy_port), *other)
    assert result.returncode == 6, result.stdout + result.stderr
    what = "gRPC (--grpc-port)" if flag == "--grpc-port" else "HTTP (--port)"
    assert result.stderr == (
        f"error: cannot listen for {what} on 127.0.0.1:{busy_port}: "
        "the port is in use by another process\n"
    )
    assert "listening" not in result.stdout
    # Found before the embedded PostgreSQL was started, or even created.
    assert not (tmp_path / ".coordinator").exists()


def test_an_address_of_no_interface_is_a_sentence(tmp_path: Path) -> None:
    result = coordinator(tmp_path, "serve", "--host", "203.0.113.7", "--port", "8080")
    assert result.returncode == 6
    assert "cannot listen for HTTP (--port) on 203.0.113.7:8080: no network interface" in (
        result.stderr
    )


def test_the_data_directory_follows_serve_and_psql_reaches_it() -> None:
    with embedded_data_dir() as base:
        _data_directory_follows_serve_and_psql_reaches_it(base)


def _data_directory_follows_serve_and_psql_reaches_it(base: Path) -> None:
    data = base / "data"
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    with serve_process(cwd=base, serve_args=["--data-dir", "data"]) as server:
        sent = httpx.post(
            f"{server.url}/v1/transactions",
            json={"topic": TOPIC, "producer_group": GROUP, "body_text": "hello"},
            timeout=10,
        ).json()
        assert (data / "pgdata" / "PG_VERSION").is_file()

        # Another directory has no database: refused, not created.
        refused = coordinator(elsewhere, "status")
        assert refused.returncode == 5
        assert f"no coordinator database in {elsewhere / '.coordinator'} " in refused.stderr
        assert not (elsewhere / ".coordinator").exists()

        shown = coordinator(
            elsewhere, "-v", "tx", "show", sent["transaction_id"], "--data-dir", str(data)
        )
        assert shown.returncode == 0, shown.stderr
        assert sent["message_id"] in shown.stdout
        assert f"database: embedded PostgreSQL, data in {data}" in shown.stderr

        # The URL `db url` prints works in any psql while the server runs.
        url = coordinator(elsewhere, "--data-dir", str(data), "db", "url").stdout.strip()
        # Sessions on it start in the coordinator's schema.
        assert url == (
            f"postgresql://postgres@/coordinator?host={data / 'pgdata'}"
            "&options=-c%20search_path%3Dcoordinator"
        )
        query = ["-At", "-c", "SELECT transaction_id FROM messages"]
        psql = subprocess.run(
            [str(bundled_program("psql")), url, *query], capture_output=True, text=True, timeout=60
        )
        assert psql.stdout.strip() == sent["transaction_id"], psql.stderr

        opened = coordinator(elsewhere, "psql", "--data-dir", str(data), *query)
        assert opened.returncode == 0, opened.stderr
        assert opened.stdout.strip() == sent["transaction_id"]


def test_a_config_file_reaches_every_worker(tmp_path: Path, database_url: str) -> None:
    config = tmp_path / "coordinator.toml"
    config.write_text(f'database_url = "{database_url}"\nmax_body_bytes = 16\n')
    with serve_process(
        cwd=tmp_path, global_args=["--config", str(config)], serve_args=["--workers", "2"]
    ) as server:
        # A connection each: the workers take turns accepting them.
        for _ in range(8):
            with httpx.Client(base_url=server.url, timeout=10) as http:
                small = {"topic": TOPIC, "producer_group": GROUP, "body_text": "x" * 16}
                assert http.post("/v1/transactions", json=small).status_code == 201
                large = {**small, "body_text": "x" * 17}
                refused = http.post("/v1/transactions", json=large)
                assert refused.status_code == 400
                assert "the message body has 17 bytes; at most 16" in refused.text
