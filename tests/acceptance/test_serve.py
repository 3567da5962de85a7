"""`coordinator serve` as a user runs it: a separate process, embedded by default."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil
import psycopg
import pytest

from bench.server import free_port, serve_process
from coordinator.core.tokens import secret_sha256
from coordinator.db.queries import execute_sync
from tests.factories import GROUP, TOPIC
from tests.processes import embedded_data_dir, postmasters_of

pytestmark = pytest.mark.slow


@contextmanager
def serve(
    workdir: Path, *args: str, env: dict[str, str] | None = None, extra: list[str] | None = None
) -> Iterator[str]:
    with serve_process(cwd=workdir, global_args=args, serve_args=extra or [], env=env) as server:
        yield server.url


def _prepare(url: str, n: int) -> list[dict]:
    return [
        httpx.post(
            f"{url}/v1/transactions",
            json={"topic": TOPIC, "producer_group": GROUP, "body_text": f"order {i}"},
            timeout=10,
        ).json()
        for i in range(n)
    ]


def test_serve_with_no_database_url_runs_an_embedded_postgres() -> None:
    with embedded_data_dir() as workdir:
        with serve(workdir) as url:
            (sent,) = _prepare(url, 1)
            ended = httpx.post(
                f"{url}/v1/transactions/{sent['transaction_id']}/end",
                json={"producer_group": GROUP, "resolution": "commit"},
            )
            assert ended.json()["state"] == "committed"
        pgdata = workdir / ".coordinator" / "pgdata"
        assert (pgdata / "PG_VERSION").exists()
        # stopped with the coordinator (SIGTERM): no postgres left running
        assert postmasters_of(pgdata) == []
        assert not (pgdata / "postmaster.pid").exists()


def test_serve_with_a_database_url_never_starts_a_server(tmp_path: Path, database_url: str) -> None:
    with serve(tmp_path, "--database-url", database_url) as url:
        assert len(_prepare(url, 2)) == 2
    assert not (tmp_path / ".coordinator").exists()


def test_a_killed_coordinator_loses_no_acknowledged_message(tmp_path: Path) -> None:
    with embedded_data_dir() as data_dir:
        data = {"COORDINATOR_DATA_DIR": str(data_dir)}
        pgdata = data_dir / "pgdata"
        with serve_process(cwd=tmp_path, env=data) as server:
            acknowledged = _prepare(server.url, 20)
            server.process.kill()  # SIGKILL: no shutdown hooks run
            server.process.wait()

        with serve(tmp_path, env=data) as url:
            for sent in acknowledged:
                found = httpx.get(f"{url}/v1/transactions/{sent['transaction_id']}")
                assert found.status_code == 200 and found.json()["state"] == "prepared"
            commit = httpx.post(
                f"{url}/v1/transactions/{acknowledged[0]['transaction_id']}/end",
                json={"producer_group": GROUP, "resolution": "commit"},
            )
            assert commit.json()["changed"] is True

        # The killed coordinator never said it stopped using the server; the
        # one that took over, the last user alive, stops it when it stops.
        assert postmasters_of(pgdata) == []
        assert not (pgdata / "postmaster.pid").exists()


def test_serve_with_several_workers_shares_the_port_and_the_database(
    tmp_path: Path, database_url: str
) -> None:
    with serve(
        tmp_path,
        "--database-url",
        database_url,
        env={"COORDINATOR_CHECK_PUSH_SECRET": "s3cret"},
        extra=["--workers", "2"],
    ) as url:
        sent = _prepare(url, 20)
        for message in sent:
            ended = httpx.post(
                f"{url}/v1/transactions/{message['transaction_id']}/end",
                json={"producer_group": GROUP, "resolution": "commit"},
            )
            assert ended.json()["state"] == "committed"


def run_serve(workdir: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """`coordinator ARGS` run to its end, for a start that must fail (killed at the timeout)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
    return subprocess.run(
        [sys.executable, "-m", "coordinator", *args],
        cwd=workdir,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _output_of(process: subprocess.Popen[bytes]) -> str:
    return process.stdout.read().decode() if process.stdout else ""


def test_serve_on_a_public_address_without_a_token_refuses_to_start(
    tmp_path: Path, database_url: str
) -> None:
    result = run_serve(
        tmp_path,
        "--database-url",
        database_url,
        "serve",
        "--host",
        "0.0.0.0",
        "--port",
        str(free_port()),
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert (
        "refusing to listen on 0.0.0.0 without authentication: create a token with "
        "`coordinator tokens create`, listen on 127.0.0.1, or pass --insecure"
    ) in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert "listening on" not in result.stdout


def test_serve_insecure_on_a_public_address_starts_and_warns(
    tmp_path: Path, database_url: str
) -> None:
    # Bound to every address, but the test's traffic stays on loopback.
    with serve_process(
        cwd=tmp_path,
        global_args=["--database-url", database_url],
        serve_args=["--host", "0.0.0.0", "--insecure"],
    ) as server:
        assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
    output = _output_of(server.process)
    port = server.url.rsplit(":", 1)[1]
    assert (
        f"warning: authentication is off (no token exists, --insecure) on 0.0.0.0: anyone who "
        f"can reach port {port} can take over the transactions"
    ) in output
    assert f"coordinator listening on http://0.0.0.0:{port} (API docs at /docs)" in output


def test_serve_on_loopback_without_a_token_says_authentication_is_off(
    tmp_path: Path, database_url: str
) -> None:
    # The primary may serve the figures' reads too: what read_database_url names is said.
    read = ["--read-database-url", database_url]
    with serve_process(cwd=tmp_path, global_args=["--database-url", database_url, *read]) as server:
        assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
        assert httpx.get(f"{server.url}/v1/overview", timeout=10).status_code == 200
    output = _output_of(server.process)
    assert "authentication is off (no token exists): listening on loopback only" in output
    assert f"coordinator listening on {server.url} (API docs at /docs)" in output
    assert f"figures read from: {database_url}" in output


def _create_token(database_url: str, name: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        execute_sync(
            conn,
            "create_token",
            {
                "name": name,
                "secret_sha256": secret_sha256(f"coord_{name}-secret"),
                "produce_topics": [],
                "producer_groups": [],
                "consume_groups": [],
                "consume_topics": [],
                "admin": False,
                "metrics": True,
            },
        )


def test_serve_with_tokens_says_authentication_is_on_and_may_listen_publicly(
    tmp_path: Path, database_url: str
) -> None:
    _create_token(database_url, "ops")
    _create_token(database_url, "dashboards")
    with serve_process(
        cwd=tmp_path,
        global_args=["--database-url", database_url],
        serve_args=["--host", "0.0.0.0"],
    ) as server:
        assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
    output = _output_of(server.process)
    assert "authentication is on (2 tokens)" in output
    assert "authentication is off" not in output
    # Only that the tokens travel unencrypted (no TLS): test_security_grpc_door.py.
    assert "warning: tokens cross the network in clear text" in output


def _get_health(conn: http.client.HTTPConnection) -> int:
    conn.request("GET", "/health")
    response = conn.getresponse()
    response.read()
    return response.status


def test_a_connection_beyond_max_connections_is_answered_429_and_closed(
    tmp_path: Path, database_url: str
) -> None:
    with serve(
        tmp_path,
        "--database-url",
        database_url,
        env={"COORDINATOR_MAX_CONNECTIONS": "2"},
    ) as url:
        host, port = url.removeprefix("http://").split(":")
        held = [http.client.HTTPConnection(host, int(port), timeout=10) for _ in range(2)]
        try:
            # One request each: both connections are open, kept alive and counted.
            assert [_get_health(conn) for conn in held] == [200, 200]

            with socket.create_connection((host, int(port)), timeout=10) as third:
                third.sendall(b"GET /health HTTP/1.1\r\nhost: test\r\n\r\n")
                answer = b""
                while chunk := third.recv(65536):  # b"": the server closed it
                    answer += chunk
            head, body = answer.split(b"\r\n\r\n", 1)
            assert head.startswith(b"HTTP/1.1 429 Too Many Requests\r\n")
            assert b"connection: close" in head.lower()
            assert json.loads(body)["error"] == "too_many_connections"

            # The held connections were not disturbed.
            assert _get_health(held[1]) == 200

            held[0].close()
            # The server frees the slot when it sees the close: allow it a moment.
            deadline = time.monotonic() + 5
            while True:
                fresh = http.client.HTTPConnection(host, int(port), timeout=10)
                try:
                    status = _get_health(fresh)
                except (ConnectionError, http.client.HTTPException):
                    status = 0
                finally:
                    fresh.close()
                if status == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert status == 200
        finally:
            for conn in held:
                conn.close()


def test_serve_answers_a_request_that_does_not_arrive_in_time_with_408(
    tmp_path: Path, database_url: str
) -> None:
    with serve(
        tmp_path,
        "--database-url",
        database_url,
        env={"COORDINATOR_REQUEST_READ_TIMEOUT_SECONDS": "1"},
    ) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nhost: te")  # and nothing more
            answer = b""
            while chunk := sock.recv(65536):  # b"": the server closed it
                answer += chunk
    head, body = answer.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert json.loads(body)["error"] == "request_timeout"


def _workers_of(parent: psutil.Process) -> list[psutil.Process]:
    # spawn's children run `spawn_main`; its resource tracker is a child too.
    return [
        child
        for child in parent.children()
        if any("spawn_main" in part for part in child.cmdline())
    ]


def test_a_worker_that_dies_after_it_served_is_replaced(tmp_path: Path, database_url: str) -> None:
    with serve_process(
        cwd=tmp_path, global_args=["--database-url", database_url], serve_args=["--workers", "2"]
    ) as server:
        parent = psutil.Process(server.process.pid)
        deadline = time.monotonic() + 60
        while len(workers := _workers_of(parent)) < 2:
            assert time.monotonic() < deadline, "two workers never ran"
            time.sleep(0.1)
        victim = workers[0]
        victim.kill()
        victim.wait(timeout=30)
        while {w.pid for w in _workers_of(parent)} & {victim.pid} or len(_workers_of(parent)) < 2:
            assert time.monotonic() < deadline + 60, "the dead worker was not replaced"
            time.sleep(0.1)
        # Every connection is served, whichever worker the kernel hands it to.
        assert all(sent["state"] == "prepared" for sent in _prepare(server.url, 10))
        server.process.terminate()
        assert server.process.wait(timeout=60) == 0


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_node_that_cannot_start_ends_serve_with_a_sentence(
    tmp_path: Path, database_url: str, workers: str
) -> None:
    # More connections than PostgreSQL allows (100): the node's pool never
    # opens; the database itself answers serve's own checks before.
    environment = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
    environment.update(COORDINATOR_POOL_MIN_SIZE="150", COORDINATOR_POOL_MAX_SIZE="150")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "coordinator",
            "--database-url",
            database_url,
            "serve",
            "--port",
            str(free_port()),
            "--workers",
            workers,
        ],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the coordinator did not start" in done.stderr, done.stderr
