"""Real processes for fault tests: `coordinator serve`, PostgreSQL, push check receivers.

Every process started here runs in a session of its own and is stopped, its
whole process group, when the block that started it ends, however it ends:
a test that fails must not leave a server, a producer or a PostgreSQL
running behind it. Every wait is bounded.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

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


def exited_within(process: subprocess.Popen[bytes], timeout: float) -> bool:
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
    exited_within(process, STOP_SECONDS)
    # Whatever the leader did, nothing of its group may outlive the test.
    kill_group(process, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=STOP_SECONDS)


def postmasters_of(pgdata: Path) -> list[int]:
    """The pids of the live (not zombie) PostgreSQL servers on `pgdata`, or under it.

    Found by their command line (`postgres -D PGDATA ...`, as pg_ctl starts
    them), not by postmaster.pid, which a killed server leaves behind.
    """
    wanted = pgdata.resolve()
    found = []
    for process in psutil.process_iter(["name", "cmdline", "status"]):
        info = process.info
        if info["name"] != "postgres" or info["status"] == psutil.STATUS_ZOMBIE:
            continue
        cmdline = info["cmdline"] or []
        data = [cmdline[i + 1] for i, arg in enumerate(cmdline[:-1]) if arg == "-D"]
        if any(Path(d) == wanted or wanted in Path(d).parents for d in data):
            found.append(process.pid)
    return found


@contextmanager
def postgres_stopped_at_the_end(pgdata: Path) -> Iterator[None]:
    """Stop every PostgreSQL server on `pgdata` (or under it) when the block ends, however
    it ends.

    For tests that start a coordinator on the embedded server and may fail (or
    SIGKILL it) before it stops the server: the test asserts what the
    coordinator should have done, this makes sure nothing outlives the test.
    """
    try:
        yield
    finally:
        for pid in postmasters_of(pgdata):
            with suppress(psutil.NoSuchProcess):
                server = psutil.Process(pid)
                server.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown
                try:
                    server.wait(STOP_SECONDS)
                except psutil.TimeoutExpired:
                    server.kill()


@contextmanager
def embedded_data_dir() -> Iterator[Path]:
    """A directory for embedded PostgreSQL data: its servers stopped, itself removed, at the end.

    Not under pytest's tmp_path: run as root, pgserver runs postgres as a user
    of its own, which must traverse the directory's parents, and every pytest
    session that starts makes /tmp/pytest-of-<user> private again. A server
    under it then fails to start (initdb) or to stop (its shutdown checkpoint
    PANICs) whenever another session starts at that moment.
    """
    path = Path(tempfile.mkdtemp(prefix="coordinator-embedded-"))
    try:
        with postgres_stopped_at_the_end(path):
            yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


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


def exit_status(process: subprocess.Popen[bytes]) -> int | None:
    """The exit status of a leader that exited (reaped or not), else None; -N: signal N."""
    with suppress(ChildProcessError):
        found = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if found is not None:
            return found.si_status if found.si_code == os.CLD_EXITED else -found.si_status
    return process.returncode


def live_processes(pids: Iterable[int]) -> list[int]:
    """Those of `pids` still running (a zombie is not)."""
    alive = []
    for pid in pids:
        with suppress(psutil.NoSuchProcess):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
    return alive


@contextmanager
def coordinator_serve(
    database_url: str | None,
    workdir: Path,
    name: str = "serve",
    global_args: Sequence[str] = (),
    serve_args: Sequence[str] = (),
    **settings: object,
) -> Iterator[ServeProcess]:
    """`coordinator --database-url URL [global_args] serve [serve_args]` on a free port,
    healthy when yielded.

    With `database_url` None, on the embedded PostgreSQL (give `data_dir`): a
    coordinator SIGKILLed (or one that fails) would leave that server running,
    so such a test runs in `postgres_stopped_at_the_end(data_dir / "pgdata")`.
    The output goes to a file, not a pipe nobody reads, which a chatty server
    under load would fill and block on.
    """
    port = free_port()
    log = workdir / f"{name}-{port}.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "coordinator",
                *(["--database-url", database_url] if database_url else []),
                *global_args,
                "serve",
                "--port",
                str(port),
                *serve_args,
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
