"""Who spent the CPU of a benchmark run: the server's threads, Postgres, the load generator.

A throughput figure alone cannot say why a door is slow on a 2-core machine
where the load generator, the server and Postgres share the cores. Each is
read from /proc before and after the run (Linux only; elsewhere nothing is
reported), and divided by the messages of the run: microseconds of CPU per
message, comparable between doors and between runs.

The server is split by thread, because a gRPC server spends a large part of
its time outside Python: grpc core's own threads read and write the HTTP/2
frames, and the event loop's thread runs the handlers (protobuf, the
coordinator's core, psycopg). Postgres is every process under the
postmaster of the measured database (backends, WAL writer, checkpointer), not
any other Postgres on the machine.

Beside the CPU, the write transactions Postgres ran per message (from its
transaction id counter, which only writes advance): with group commit, how
many requests shared each transaction.
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

PROC = Path("/proc")
TICK_SECONDS = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def _ticks(stat_file: Path) -> tuple[str, float] | None:
    """(command name, user + system CPU seconds) of one process or thread, None once gone."""
    try:
        text = stat_file.read_text()
    except OSError:
        return None
    # The name is in parentheses and may itself hold spaces or parentheses.
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    # utime and stime are fields 14 and 15 of stat(5); fields[0] is field 3.
    return name, (int(fields[11]) + int(fields[12])) * TICK_SECONDS


def _threads(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of `pid`, summed by kind: 'main' (the event loop),
    'python_thread' (threads Python started, such as grpc.aio's completion-queue
    poller: they keep the process's name), or the name a library gave its threads
    (grpc core's 'event_engine')."""
    main = _ticks(PROC / str(pid) / "stat")
    process_name = main[0] if main else ""
    spent: Counter[str] = Counter()
    for task in (PROC / str(pid) / "task").iterdir():
        found = _ticks(task / "stat")
        if found is None:
            continue
        name, seconds = found
        if task.name == str(pid):
            kind = "main"
        elif name == process_name:
            kind = "python_thread"
        else:
            # Names may carry numbers ("default-executo", "Thread-12"); what
            # matters is which kind of thread spent the time.
            kind = re.sub(r"[-_ ]?\d+$", "", name) or name
        spent[kind] += seconds
    return dict(spent)


def _children(parent: int) -> list[int]:
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        match = re.search(r"^PPid:\s+(\d+)", status, re.MULTILINE)
        if match and int(match.group(1)) == parent:
            found.append(int(entry.name))
    return found


def postmaster_pid(database_url: str) -> int | None:
    """The postmaster serving `database_url` (the parent of a backend), None if not local."""
    if not PROC.exists():
        return None
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    status = PROC / str(row[0]) / "status"
    if not status.exists():
        return None  # a server on another machine (or in another PID namespace)
    match = re.search(r"^PPid:\s+(\d+)", status.read_text(), re.MULTILINE)
    return int(match.group(1)) if match else None


def _postgres_seconds(postmaster: int) -> float:
    total = 0.0
    for pid in [postmaster, *_children(postmaster)]:
        found = _ticks(PROC / str(pid) / "stat")
        if found is not None:
            total += found[1]
    return total


def _machine_busy_seconds() -> float:
    """CPU seconds all cores spent not idle (anyone's work, this benchmark's or not)."""
    first = (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]
    ticks = [int(value) for value in first[:8]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks) - idle) * TICK_SECONDS


@dataclass
class CpuSnapshot:
    wall: float
    server_threads: dict[str, float] = field(default_factory=dict)
    postgres: float | None = None  # None: no local Postgres measured
    load_generator: float = 0.0
    machine_busy: float = 0.0
    write_transactions: int | None = None


@dataclass
class CpuMeter:
    """Snapshots of the server process, the postmaster's tree and this process."""

    server_pid: int | None
    postmaster: int | None
    database_url: str | None = None

    @property
    def available(self) -> bool:
        return PROC.exists() and self.server_pid is not None

    def snapshot(self) -> CpuSnapshot | None:
        if not self.available:
            return None
        assert self.server_pid is not None
        return CpuSnapshot(
            wall=time.perf_counter(),
            server_threads=_threads(self.server_pid),
            postgres=_postgres_seconds(self.postmaster) if self.postmaster else None,
            # The load generator is this process: its own CPU, all its threads.
            load_generator=time.process_time(),
            machine_busy=_machine_busy_seconds(),
            write_transactions=_write_transactions(self.database_url),
        )


def _write_transactions(database_url: str | None) -> int | None:
    if database_url is None:
        return None
    with psycopg.connect(database_url, autocommit=True) as conn:
        # Assigns an id itself: one write transaction per snapshot, negligible.
        row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
    assert row is not None
    return int(row[0])


def per_message(
    before: CpuSnapshot | None, after: CpuSnapshot | None, messages: int
) -> dict[str, float] | None:
    """µs of CPU per message by whom, and how busy the machine's cores were (0..cores)."""
    if before is None or after is None or messages <= 0:
        return None
    wall = after.wall - before.wall

    def us(seconds: float) -> float:
        return round(seconds / messages * 1e6, 1)

    threads = {
        name: after.server_threads.get(name, 0.0) - before.server_threads.get(name, 0.0)
        for name in after.server_threads
    }
    server = sum(threads.values())
    split = {
        f"server_{name}_us": us(spent)
        for name, spent in sorted(threads.items(), key=lambda item: -item[1])
        if spent > 0
    }
    figures = {"server_us": us(server), **split}
    if after.postgres is not None and before.postgres is not None:
        figures["postgres_us"] = us(after.postgres - before.postgres)
    figures["load_generator_us"] = us(after.load_generator - before.load_generator)
    if after.write_transactions is not None and before.write_transactions is not None:
        figures["pg_write_transactions_per_message"] = round(
            (after.write_transactions - before.write_transactions) / messages, 3
        )
    figures["cores_busy"] = round((after.machine_busy - before.machine_busy) / wall, 2)
    figures["server_cores"] = round(server / wall, 2)
    return figures
