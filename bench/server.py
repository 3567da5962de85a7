"""`coordinator serve` as a separate process, as users run it (benchmarks and tests)."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx


@dataclass(frozen=True)
class RunningServer:
    url: str
    process: subprocess.Popen[bytes]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve_process(
    *,
    cwd: Path | None = None,
    global_args: Sequence[str] = (),
    serve_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    startup_seconds: float = 90.0,
    tls: ssl.SSLContext | None = None,
    output: IO[bytes] | None = None,
) -> Iterator[RunningServer]:
    """Start `coordinator [global_args] serve [serve_args]`, wait until healthy, stop on exit.

    The caller's COORDINATOR_* variables are not inherited: only `env` counts.
    With `tls` (a client context trusting the server's certificate) the server
    is expected to speak HTTPS, and the URL is https://. The server's output
    goes to `output` (a file) or else to a pipe, `process.stdout`, which a
    server under load fills (its access log) unless the caller reads it.
    """
    port = free_port()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
    environment.update(env or {})
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "coordinator",
            *global_args,
            "serve",
            "--port",
            str(port),
            *serve_args,
        ],
        cwd=cwd,
        env=environment,
        stdout=output if output is not None else subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_seconds
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"coordinator serve exited: {_output(process, output)}")
            try:
                health = httpx.get(f"{url}/health", timeout=1, verify=tls or True)
                if health.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("coordinator serve did not become healthy")
            time.sleep(0.2)
        yield RunningServer(url, process)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _output(process: subprocess.Popen[bytes], output: IO[bytes] | None) -> str:
    if output is not None:
        output.seek(0)
        return output.read().decode(errors="replace")
    return process.stdout.read().decode() if process.stdout else ""


@contextmanager
def coordinator_process(
    database_url: str, *, workers: int = 1, source: Path | None = None, **settings: object
) -> Iterator[RunningServer]:
    """A server on `database_url` with COORDINATOR_<NAME> settings (its process too, to
    measure its CPU).

    With `source` (a checkout or a git worktree) the server runs that tree's code, not
    the one this process imports: PYTHONPATH names the tree, and it is also the working
    directory, because `python -m` puts the working directory first on the path.
    """
    env = {f"COORDINATOR_{name.upper()}": str(value) for name, value in settings.items()}
    env["COORDINATOR_DATABASE_URL"] = database_url
    if source is not None:
        env["PYTHONPATH"] = str(source)
    # Its output (the access log: a line per request) goes to a file, as it
    # would in production, not to a pipe that nobody reads and that would fill.
    with (
        tempfile.TemporaryFile(prefix="coordinator-serve-") as output,
        serve_process(
            cwd=source, env=env, serve_args=["--workers", str(workers)], output=output
        ) as server,
    ):
        yield server


@contextmanager
def coordinator_server(database_url: str, *, workers: int = 1, **settings: object) -> Iterator[str]:
    """A server on `database_url` with COORDINATOR_<NAME> settings; yields its URL."""
    with coordinator_process(database_url, workers=workers, **settings) as server:
        yield server.url
