"""No process a test started may outlive the test session: checked when it ends.

At the session's start this process puts a mark of the session in its
environment, which every process started from then on inherits: coordinator
servers, RocketMQ clients, Node.js, Java (Spark), and the PostgreSQL servers
pgserver starts (pg_ctl passes its environment on). The session's own
PostgreSQL (tests/conftest.py), started before, has no mark: it is stopped
after this check.

When the session ends, every fixture is finalized: any process that is still
running with the mark was left behind by a test. The check lists them, stops
them (PostgreSQL with a fast shutdown, anything else with SIGTERM, then
SIGKILL) and fails the session. Other sessions on the machine have marks of
their own and are left alone.

The hooks are registered by tests/conftest.py.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import psutil
import pytest

# Not COORDINATOR_*: the tests' process helpers drop those from the
# environments they give servers.
MARK = "PYTEST_COORDINATOR_SESSION"
# What a process stopped by its test may take to be gone (a postmaster's
# shutdown checkpoint, multiprocessing's resource tracker noticing its parent left).
GRACE_SECONDS = 10.0


def pytest_sessionstart(session: pytest.Session) -> None:
    os.environ[MARK] = uuid.uuid4().hex


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    mark = os.environ.get(MARK)
    if mark is None:
        return
    deadline = time.monotonic() + GRACE_SECONDS
    while (left := marked_processes(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if not left:
        return
    described = [_describe(process) for process in left]
    _stop(left)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            f"\n{len(described)} process(es) started by the tests outlived them (now stopped):",
            red=True,
            bold=True,
        )
        for line in described:
            reporter.write_line(f"  {line}", red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def marked_processes(mark: str) -> list[psutil.Process]:
    """The running (not zombie) processes whose environment carries `mark`."""
    found = []
    for process in psutil.process_iter(["status"]):
        if process.pid == os.getpid() or process.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if process.environ().get(MARK) == mark:
                found.append(process)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def _describe(process: psutil.Process) -> str:
    try:
        return f"{process.pid} {' '.join(process.cmdline())[:200]}"
    except psutil.Error:
        return f"{process.pid} (gone)"


def _stop(processes: list[psutil.Process]) -> None:
    for process in processes:
        try:
            if process.name() != "postgres":
                process.terminate()
                continue
            parent = process.parent()
            if parent is None or parent.name() != "postgres":  # a postmaster: fast shutdown
                process.send_signal(signal.SIGINT)
            # its server processes end with it
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(processes, timeout=GRACE_SECONDS)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            continue
