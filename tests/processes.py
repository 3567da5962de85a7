"""Real processes for fault tests: `coordinator serve`, PostgreSQL, push check receivers.

Every process started here runs in a session of its own and is stopped, its
whole process group, when the block that started it ends, however it ends:
a test that fails must not leave a server, a producer or a PostgreSQL
running behind it. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from bench.server import free_port
from coordinator.core.checkback.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify

# Generous: a coordinator starts in a few seconds, but the machine these
# tests run on may be busy with other test sessions.
STARTUP_SECONDS = 90.0
STOP_SECONDS = 20.0


def kill_group(process: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    """Send `sig` to the process group `process` leads (start_new_session=True).

    Only while the leader is not reaped (alive, or a zombie): until then its
    pid, which is the group's id, cannot be given to another process.
    """
    if process.returncode is not None:
        return
    with suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


def _exited(process: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait for the leader to exit without reaping it (see kill_group)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                return True
        except ChildProcessError:  # reaped already
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the group, give it time to stop, then SIGKILL whatever is left; reap."""
    kill_group(process, signal.SIGTERM)
    _exited(process, STOP_SECONDS)
    # Whatever the leader did, nothing of its group may outlive the test.
    kill_group(process, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=STOP_SECONDS)


def clean_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without COORDINATOR_* variables, plus `extra`."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
    environment.update(extra)
    return environment


@dataclass
class ServeProcess:
    """A `coordinator serve` process on 127.0.0.1; its output goes to `log`."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        """SIGKILL: no shutdown hook runs, in-flight requests lose their answers."""
        kill_group(self.process)
        with suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_SECONDS)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def settings_environment(**settings: object) -> dict[str, str]:
    """COORDINATOR_<NAME> variables for settings given by their field names."""
    return {f"COORDINATOR_{name.upper()}": str(value) for name, value in settings.items()}


@contextmanager
def coordinator_serve(
    database_url: str, workdir: Path, name: str = "serve", **settings: object
) -> Iterator[ServeProcess]:
    """`coordinator --database-url URL serve` on a free port, healthy when yielded.

    Always on a given database: a SIGKILLed coordinator that had started the
    embedded PostgreSQL would leave it running. The output goes to a file, not
    a pipe nobody reads, which a chatty server under load would fill and block on.
    """
    port = free_port()
    log = workdir / f"{name}-{port}.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "coordinator",
                "--database-url",
                database_url,
                "serve",
                "--port",
                str(port),
            ],
            cwd=workdir,
            env=clean_environment(settings_environment(**settings)),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = ServeProcess(f"http://127.0.0.1:{port}", process, log)
    try:
        _wait_healthy(server)
        yield server
    finally:
        stop_group(process)


def _wait_healthy(server: ServeProcess) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(f"coordinator serve exited:\n{server.output()}")
        with suppress(httpx.TransportError):
            if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"coordinator serve did not become healthy:\n{server.output()}")
        time.sleep(0.2)


@dataclass(frozen=True)
class Push:
    """A check request pushed to a CheckReceiver."""

    offset: int
    message_id: str
    check_count: int
    signer: str | None  # the name of the secret that signs it, None if none does
    at: float  # time.monotonic() of its arrival


# What a CheckReceiver answers a push: a resolution ("commit", "rollback",
# "unknown"), None for an empty 200, or HOLD to keep the request unanswered
# until the receiver is released.
HOLD = "hold"
Answer = Callable[[Push], str | None]


class CheckReceiver:
    """A push producer's check URL: a threaded HTTP server that answers with `answer`.

    `secrets` names the coordinators' check_push_secret values, so a test with
    several nodes sees which node sent each push.
    """

    def __init__(self, answer: Answer, secrets: Mapping[str, str] | None = None) -> None:
        self.answer = answer
        self.secrets = dict(secrets or {})
        self.pushes: list[Push] = []
        self._lock = threading.Lock()
        self._released = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                body = json.loads(raw)
                push = Push(
                    offset=body["offset"],
                    message_id=body["message_id"],
                    check_count=body["check_count"],
                    signer=receiver._signer(raw, self.headers),
                    at=time.monotonic(),
                )
                with receiver._lock:
                    receiver.pushes.append(push)
                resolution = receiver.answer(push)
                if resolution == HOLD:
                    # The pushing node waits for an answer that comes only
                    # when the test ends (and by then it is usually dead).
                    receiver._released.wait(timeout=300)
                    resolution = None
                content = json.dumps({"resolution": resolution}).encode() if resolution else b""
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

        class Server(ThreadingHTTPServer):
            # Several nodes push at once (max_inflight_dispatches each): the
            # default listen backlog of 5 would drop connections under load.
            request_queue_size = 256
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                # A held push answered after its node was killed fails to
                # write: expected, and not worth a traceback.
                pass

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/check"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def _signer(self, raw: bytes, headers: Any) -> str | None:
        for name, secret in self.secrets.items():
            if verify(raw, secret, headers.get(SIGNATURE_HEADER), headers.get(TIMESTAMP_HEADER)):
                return name
        return None

    def received(self) -> list[Push]:
        with self._lock:
            return list(self.pushes)

    def release(self) -> None:
        """Answer the held pushes (with an empty 200)."""
        self._released.set()

    def __enter__(self) -> CheckReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
