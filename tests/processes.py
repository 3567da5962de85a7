"""Real processes for fault tests: `coordinator serve`, PostgreSQL, push check receivers.

Every process started here runs in a session of its own and is stopped, its
whole process group, when the block that started it ends, however it ends:
a test that fails must not leave a server, a producer or a PostgreSQL
running behind it. Every wait is bounded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.server import free_port
from tests.push_receiver import PushReceiver, Received

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


class CheckReceiver(PushReceiver):
    """A push producer's check URL that answers each push with `answer`'s resolution.

    `secrets` names the coordinators' check_push_secret values, so a test with
    several nodes sees which node sent each push.
    """

    def __init__(self, answer: Answer, secrets: Mapping[str, str] | None = None) -> None:
        self.resolve = answer
        self.secrets = dict(secrets or {})
        self._released = threading.Event()
        self._pushes: list[Push] = []
        super().__init__(self._answer_push)

    def _answer_push(self, received: Received) -> tuple[int, dict[str, Any] | None]:
        body = received.json
        push = Push(
            offset=body["offset"],
            message_id=body["message_id"],
            check_count=body["check_count"],
            signer=next(
                (name for name, secret in self.secrets.items() if received.signed_with(secret)),
                None,
            ),
            at=received.at,
        )
        with self._lock:
            self._pushes.append(push)
        resolution = self.resolve(push)
        if resolution == HOLD:
            # The pushing node waits for an answer that comes only when the
            # test ends (and by then it is usually dead).
            self._released.wait(timeout=300)
            resolution = None
        return 200, {"resolution": resolution} if resolution else None

    def pushes(self) -> list[Push]:
        with self._lock:
            return list(self._pushes)

    def release(self) -> None:
        """Answer the held pushes (with an empty 200)."""
        self._released.set()

    def __exit__(self, *exc: object) -> None:
        self.release()
        super().__exit__(*exc)
