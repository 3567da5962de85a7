"""`coordinator serve` as a separate process, as users run it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def coordinator_server(database_url: str, *, workers: int = 1, **settings: object) -> Iterator[str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
    env.update({f"COORDINATOR_{k.upper()}": str(v) for k, v in settings.items()})
    env["COORDINATOR_DATABASE_URL"] = database_url
    process = subprocess.Popen(
        [
            sys.executable, "-m", "coordinator", "serve",
            "--port", str(port), "--workers", str(workers),
        ],  # fmt: skip
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(process.stderr.read().decode())  # type: ignore[union-attr]
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("coordinator serve did not become healthy")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
