"""Steady state with retention: does a node under constant load keep its tables
(and its speed) level?

    python -m bench.steady                      # ~5 minutes, embedded PostgreSQL
    python -m bench.steady --minutes 30         # longer
    python -m bench.steady --quick              # 30 s, a few seconds of retention (smoke test)
    python -m bench.steady --database-url postgresql://...   # yours (it writes to it)

A `coordinator serve` process runs with a short retention (`retention_hours`:
rows live `--lifetime` seconds after their resolution) and a short
retention interval. Producers prepare and end transactions at a fixed rate
(a share rolled back), two consumer groups receive and ack every committed
message (bench/steady_load.py). Every `--window` seconds the tables' rows
and bytes are read; the transactions' latency and throughput are cut into
the same windows afterwards. Once retention has started (lifetime plus two
rounds into the run) the tables should stop growing: the windows from then
on are split into thirds and the last compared with the first
(bench/steady_report.py). Writes bench/results/steady.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg
import uvloop
from psycopg import sql
from rich.console import Console

from bench.database import bench_database
from bench.server import coordinator_process
from bench.steady_load import CONSUMER_GROUPS, SteadyLoad
from bench.steady_report import Snapshot, print_report, thirds, window
from coordinator.db.queries import parse_queries

console = Console(width=120)
RESULTS = Path(__file__).parent / "results"
SQL = parse_queries((Path(__file__).parent / "steady.sql").read_text())
REMOVED = re.compile(r'^coordinator_retention_removed_total\{kind="(\w+)"\} (\S+)$', re.M)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = _parser().parse_args(argv)
    if args.quick:
        args.minutes, args.lifetime, args.interval, args.window = 0.5, 6.0, 1.0, 3.0
        args.rate = min(args.rate, 100.0)
    settings = {
        "rate": args.rate,
        "producers": args.producers,
        "rollback_every": args.rollback_every,
        "minutes": args.minutes,
        "window_seconds": args.window,
        "lifetime_seconds": args.lifetime,
        "retention_interval_seconds": args.interval,
        "consumer_groups": list(CONSUMER_GROUPS),
    }
    with bench_database(args.database_url) as database:
        postmaster = _postmaster(database.url) if database.embedded else None
        if database.embedded:
            # yours keeps its own settings; settings["autovacuum_naptime_seconds"] says so
            settings["autovacuum_naptime_seconds"] = _scale_autovacuum(database.url, args)
        with coordinator_process(
            database.url,
            retention_hours=args.lifetime / 3600,
            # Consumers ack everything; a delivery they missed goes soon too.
            unacked_retention_hours=2 * args.lifetime / 3600,
            retention_interval_seconds=args.interval,
        ) as server:
            coordinator_pid = server.process.pid
            run = uvloop.run(_run(server.url, database.url, args))
            removed = _retention_removed(server.url)
    processes = {"coordinator": coordinator_pid}
    if postmaster is not None:
        processes["postgres"] = postmaster
    report = _report(run, settings, removed, processes)
    print_report(console, report)
    out = Path(args.out) if args.out else RESULTS / "steady.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    console.print(f"written to {out}")
    return report


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.steady", description=__doc__)
    parser.add_argument("--database-url", help="yours (default: a fresh embedded PostgreSQL)")
    parser.add_argument("--minutes", type=float, default=5.0, help="length of the load")
    parser.add_argument("--quick", action="store_true", help="30 s with a tiny retention")
    parser.add_argument("--rate", type=float, default=200.0, help="transactions a second")
    parser.add_argument(
        "--producers", type=int, default=16, help="producer connections (each keeps rate / N)"
    )
    parser.add_argument(
        "--rollback-every", type=int, default=5, help="every Nth transaction is rolled back"
    )
    parser.add_argument(
        "--lifetime", type=float, default=60.0, help="seconds a resolved row is kept"
    )
    parser.add_argument("--interval", type=float, default=3.0, help="retention interval (s)")
    parser.add_argument("--window", type=float, default=10.0, help="seconds per window")
    parser.add_argument(
        "--autovacuum-every",
        type=float,
        help="autovacuum_naptime of the embedded server (default: a sixth of --lifetime)",
    )
    parser.add_argument("--out", help="JSON output (default: bench/results/steady.json)")
    return parser


async def _run(url: str, database_url: str, args: argparse.Namespace) -> dict[str, Any]:
    load = SteadyLoad(url, args.rate, args.producers, args.rollback_every)
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await load.start()
        began = time.perf_counter()
        snapshots: list[Snapshot] = []
        bounds: list[tuple[float, float]] = []
        since = began
        try:
            for index in range(max(1, round(args.minutes * 60 / args.window))):
                # Fixed boundaries: reading the tables does not push the windows later.
                await asyncio.sleep(
                    max(0.0, began + (index + 1) * args.window - time.perf_counter())
                )
                until = time.perf_counter()
                rows = await (await conn.execute(SQL["table_figures"])).fetchall()
                tables = {name: (n, size) for name, n, size in rows}
                snapshots.append(Snapshot(until, tables, round(os.getloadavg()[0], 2)))
                bounds.append((since, until))
                since = until
        finally:
            await load.stop()
    return {"load": load, "began": began, "snapshots": snapshots, "bounds": bounds}


def _report(
    run: dict[str, Any],
    settings: dict[str, Any],
    removed: dict[str, float],
    processes: dict[str, int],
) -> dict[str, Any]:
    samples = run["load"].samples
    began: float = run["began"]
    settled = settings["lifetime_seconds"] + 2 * settings["retention_interval_seconds"]
    windows = []
    for (since, until), snapshot in zip(run["bounds"], run["snapshots"], strict=True):
        figures = window(samples, since, until, snapshot)
        windows.append(
            {
                "end_seconds": round(until - began, 1),
                "steady": since - began >= settled,
                **figures,
            }
        )
    comparison = thirds(samples, windows, run["bounds"])
    last_end = run["bounds"][-1][1]
    stopped = _live(processes.values())
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {**settings, "retention_starts_seconds": settled},
        "windows": windows,
        "comparison": comparison,
        "totals": {
            "seconds": round(last_end - began, 1),
            "messages": sum(1 for done, _, _ in samples.transactions if done < last_end),
            "committed": sum(1 for done, _, ok in samples.transactions if done < last_end and ok),
            "consumed": {
                group: sum(n for at, n in samples.consumed[group] if at < last_end)
                for group in CONSUMER_GROUPS
            },
            "behind": samples.behind,
            "retention_removed": removed,
        },
        "processes": processes,
        "processes_left_running": stopped,
    }


def _postmaster(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        (backend,) = conn.execute(SQL["postmaster"]).fetchone()  # type: ignore[misc]
        return psutil.Process(backend).ppid()


def _scale_autovacuum(database_url: str, args: argparse.Namespace) -> int:
    """Autovacuum every sixth of the lifetime (PostgreSQL's default: every minute).

    With the default retention of days, autovacuum passes thousands of times
    in a row's lifetime; with a lifetime of a minute it would pass once, and
    the heaps and indexes would keep a whole lifetime of dead tuples.
    """
    seconds = max(1, round(args.autovacuum_every or args.lifetime / 6))
    with psycopg.connect(database_url, autocommit=True) as conn:
        # ALTER SYSTEM takes no bind parameters: the value goes in as a quoted literal.
        conn.execute(sql.SQL(SQL["scale_autovacuum"]).format(seconds=sql.Literal(seconds)))
        conn.execute(SQL["reload_configuration"])
    # What the server now runs with, read back on sessions started after the
    # reload (the postmaster rereads its configuration soon, not at once).
    deadline = time.monotonic() + 10
    while True:
        with psycopg.connect(database_url) as conn:
            (applied,) = conn.execute(SQL["autovacuum_naptime"]).fetchone()  # type: ignore[misc]
        if applied == seconds or time.monotonic() > deadline:
            return int(applied)
        time.sleep(0.1)


def _retention_removed(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {kind: float(value) for kind, value in REMOVED.findall(text)}


def _live(pids: Any) -> list[int]:
    """Those of `pids` still running after a short grace (a zombie is not running)."""
    deadline = time.monotonic() + 10
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


if __name__ == "__main__":
    main()
