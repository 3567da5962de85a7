"""`coordinator serve` as a user runs it: a separate process, embedded by default."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.factories import GROUP, TOPIC

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve(
    workdir: Path, *args: str, env: dict[str, str] | None = None, extra: list[str] | None = None
) -> Iterator[str]:
    port = _free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
    environment.update(env or {})
    process = subprocess.Popen(
        [sys.executable, "-m", "coordinator", *args, "serve", "--port", str(port), *(extra or [])],
        cwd=workdir,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None:
                raise AssertionError(process.stdout.read().decode())  # type: ignore[union-attr]
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("coordinator serve did not become healthy")
            time.sleep(0.2)
        yield url
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


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
    assert (tmp_path / ".coordinator" / "pgdata" / "PG_VERSION").exists()


def test_serve_with_a_database_url_never_starts_a_server(tmp_path: Path, database_url: str) -> None:
    with serve(tmp_path, "--database-url", database_url) as url:
        assert len(_prepare(url, 2)) == 2
    assert not (tmp_path / ".coordinator").exists()


def test_a_killed_coordinator_loses_no_acknowledged_message(tmp_path: Path) -> None:
    data = {"COORDINATOR_DATA_DIR": str(tmp_path / "data")}
    port = _free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
    process = subprocess.Popen(
        [sys.executable, "-m", "coordinator", "serve", "--port", str(port)],
        cwd=tmp_path,
        env={**environment, **data},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(450):
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        acknowledged = _prepare(url, 20)
    finally:
        process.kill()  # SIGKILL: no shutdown hooks run
        process.wait()

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
