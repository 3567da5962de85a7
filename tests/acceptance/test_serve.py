"""`coordinator serve` as a user runs it: a separate process, embedded by default."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
import pytest

from bench.server import serve_process
from tests.factories import GROUP, TOPIC

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


def test_serve_with_no_database_url_runs_an_embedded_postgres(tmp_path: Path) -> None:
    with serve(tmp_path) as url:
        (sent,) = _prepare(url, 1)
        ended = httpx.post(
            f"{url}/v1/transactions/{sent['transaction_id']}/end",
            json={"producer_group": GROUP, "resolution": "commit"},
        )
        assert ended.json()["state"] == "committed"
    pgdata = tmp_path / ".coordinator" / "pgdata"
    assert (pgdata / "PG_VERSION").exists()
    # stopped with the coordinator (SIGTERM): no postgres left running
    assert not (pgdata / "postmaster.pid").exists()


def test_serve_with_a_database_url_never_starts_a_server(tmp_path: Path, database_url: str) -> None:
    with serve(tmp_path, "--database-url", database_url) as url:
        assert len(_prepare(url, 2)) == 2
    assert not (tmp_path / ".coordinator").exists()


@contextmanager
def _postgres_stopped_at_the_end(pgdata: Path) -> Iterator[None]:
    """Stop the embedded Postgres under pgdata when the block ends, however it ends.

    pgserver counts the processes using a server by pid and stops it when the
    last one exits; a SIGKILLed coordinator never takes its pid off that list,
    so the coordinator that adopts the server after it leaves it running.
    """
    try:
        yield
    finally:
        pid_file = pgdata / "postmaster.pid"
        with suppress(FileNotFoundError, ValueError, IndexError, ProcessLookupError):
            pid = int(pid_file.read_text().split()[0])
            os.kill(pid, signal.SIGINT)  # Postgres's fast shutdown
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                os.kill(pid, 0)  # ProcessLookupError once it is gone
                time.sleep(0.1)


def test_a_killed_coordinator_loses_no_acknowledged_message(tmp_path: Path) -> None:
    data = {"COORDINATOR_DATA_DIR": str(tmp_path / "data")}
    with _postgres_stopped_at_the_end(tmp_path / "data" / "pgdata"):
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
