"""Retention: batched deletes on today's tables, or dropping time partitions?

    python -m bench.retention_layouts             # 10M resolved messages per layout
    python -m bench.retention_layouts --quick     # 200k, short runs (a smoke test)
    python -m bench.retention_layouts --database-url postgresql://...   # yours

Two layouts of the coordinator's messages, message_history and deliveries,
each in a scratch schema of one database (bench/retention_layouts.sql):
`plain`, today's tables, and `partitioned`, messages and their history
range-partitioned by day. For each, while a constant single-message load
runs the hot path's own SQL (bench/retention_load.py):

1. the load on the empty layout, then filled with N resolved messages (two
   history rows each, one in a hundred with an unacked delivery) spread over
   `--days` days: the ratio filled / empty (the target is >= 0.9);
2. removing the oldest days (`--remove` of them): on `plain` by batched
   DELETE (`--batch` messages per transaction, ORDER BY resolved_at LIMIT
   ... SKIP LOCKED, as a retention job would), on `partitioned` by DETACH
   CONCURRENTLY and DROP of whole partitions: the wall time, the load's
   throughput and p50/p99 during the removal against just before it, and
   the tables' sizes before, after, and after VACUUM.

Ratios are taken within the run (the machine is shared and noisy); absolute
figures are printed and written to JSON beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import median
from typing import Any

import psycopg
from psycopg import sql
from rich.console import Console

from bench.database import bench_database
from bench.retention_load import Load, LoadFigures, measure
from bench.retention_report import compare, filled_ratios, print_report, ratio
from coordinator.db.queries import parse_queries

console = Console(width=120)
RESULTS = Path(__file__).parent / "results"
SQL = parse_queries((Path(__file__).parent / "retention_layouts.sql").read_text())
LAYOUTS = {"plain": "retention_plain", "partitioned": "retention_partitioned"}
TABLES = ["messages", "message_history", "deliveries"]
FILL_CHUNK = 250_000


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="measure this server (default: embedded)")
    parser.add_argument("--rows", type=int, default=10_000_000, help="resolved messages")
    parser.add_argument("--days", type=int, default=30, help="the time range they span")
    parser.add_argument("--remove", type=float, default=0.1, help="fraction of days removed")
    parser.add_argument("--batch", type=int, default=5000, help="messages per DELETE")
    parser.add_argument("--clients", type=int, default=8, help="connections of the load")
    parser.add_argument("--seconds", type=float, default=10.0, help="each load window")
    parser.add_argument("--rounds", type=int, default=3, help="windows per layout, alternating")
    parser.add_argument("--layouts", nargs="+", choices=list(LAYOUTS), default=list(LAYOUTS))
    parser.add_argument("--quick", action="store_true", help="200k rows, 2-second windows")
    parser.add_argument("--out", type=Path, default=RESULTS / "retention_layouts.json")
    args = parser.parse_args(argv)
    # A long run stopped with SIGTERM still stops its embedded server and drops its schemas.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.quick:
        args.rows, args.seconds = min(args.rows, 200_000), min(args.seconds, 2.0)
        args.rounds = min(args.rounds, 2)

    report: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {k: str(v) for k, v in vars(args).items()},
        "layouts": {},
    }
    with bench_database(args.database_url) as database:
        report["database"] = "embedded (pgserver)" if database.embedded else "external"
        try:
            report["layouts"] = asyncio.run(run_layouts(database.url, args))
        finally:
            for layout in args.layouts:
                _drop(database.url, LAYOUTS[layout])
    report["comparison"] = compare(report["layouts"])
    print_report(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    console.print(f"written to {args.out}")
    return report


@dataclass(frozen=True)
class Plan:
    """The days the filled messages span and the cutoff of the removal (UTC days)."""

    start: datetime
    today: datetime
    removed_days: int

    @classmethod
    def of(cls, args: argparse.Namespace) -> Plan:
        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        removed = max(1, round(args.days * args.remove))
        return cls(today - timedelta(days=args.days), today, removed)

    @property
    def cutoff(self) -> datetime:
        return self.start + timedelta(days=self.removed_days)


async def run_layouts(url: str, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Both layouts side by side: the load's windows alternate between them, so that
    the machine's drift (it is shared) falls on both alike."""
    plan = Plan.of(args)
    results: dict[str, dict[str, Any]] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for layout in args.layouts:
            conn.execute(_format("layout_schema", layout=sql.Identifier(LAYOUTS[layout])))
            conn.execute(SQL[f"{layout}_layout"])
            if layout == "partitioned":
                last_day = plan.today + timedelta(days=3)
                conn.execute(SQL["add_days"], {"first_day": plan.start, "last_day": last_day})
            results[layout] = {"removed_days": plan.removed_days, "cutoff": plan.cutoff.isoformat()}
    for layout in args.layouts:  # connections, plans, and statistics of a table in use
        await measure(url, LAYOUTS[layout], args.clients, min(2.0, args.seconds))
        with _connect(url, LAYOUTS[layout]) as conn:
            conn.execute(SQL["analyze"])
    await _rounds(url, args, results, "empty")
    for layout in args.layouts:
        with console.status(f"{layout}: filling {args.rows:,} resolved messages ...") as status:
            results[layout] |= _fill(url, LAYOUTS[layout], args.rows, plan, args.days, status)
        console.print(f"{layout}: filled in {results[layout]['fill_seconds']} s")
    await _rounds(url, args, results, "filled")
    for layout, result in results.items():
        result |= await _removal(url, layout, args, plan)
    # Empty again, now that the server has written (and recycles) gigabytes of
    # WAL and its caches are warm, as they were for the filled windows: the
    # first empty windows ran on a fresh server.
    for layout in args.layouts:
        with _connect(url, LAYOUTS[layout]) as conn:
            conn.execute(SQL["empty_tables"])
    await _rounds(url, args, results, "emptied")
    for result in results.values():
        result |= filled_ratios(result)
    return results


async def _rounds(
    url: str, args: argparse.Namespace, results: dict[str, dict[str, Any]], window: str
) -> None:
    """`--rounds` windows of the load per layout, alternating; the medians of each figure."""
    rounds: dict[str, list[LoadFigures]] = {layout: [] for layout in results}
    for number in range(args.rounds):
        for layout in results:
            with console.status(f"{layout}: the load, {window}, round {number + 1} ..."):
                rounds[layout].append(
                    await measure(url, LAYOUTS[layout], args.clients, args.seconds)
                )
    for layout, figures in rounds.items():
        results[layout][window] = {
            "messages_per_second": median(f.messages_per_second for f in figures),
            "p50_ms": median(f.p50_ms for f in figures),
            "p99_ms": median(f.p99_ms for f in figures),
            "rounds": [asdict(f) for f in figures],
        }
        console.print(
            f"{layout}, {window}: {results[layout][window]['messages_per_second']:,.0f} msgs/s"
        )


def _fill(url: str, schema: str, rows: int, plan: Plan, days: int, status: Any) -> dict[str, Any]:
    began = time.perf_counter()
    step = days * 86400 / rows
    with _connect(url, schema) as conn:
        for first in range(1, rows + 1, FILL_CHUNK):
            last = min(rows, first + FILL_CHUNK - 1)
            params = {"first": first, "last": last, "start": plan.start, "step": step}
            conn.execute(SQL["fill"], params)
            status.update(f"{schema}: filled {last:,} of {rows:,} resolved messages ...")
        conn.execute(SQL["vacuum"])  # as autovacuum would have by then: visibility, statistics
        return {"fill_seconds": round(time.perf_counter() - began, 1), "sizes_filled": _sizes(conn)}


async def _removal(url: str, layout: str, args: argparse.Namespace, plan: Plan) -> dict[str, Any]:
    """The oldest days removed while the load runs: a window before, during and after."""
    schema = LAYOUTS[layout]
    with _connect(url, schema) as conn:
        (older,) = conn.execute(SQL["count_older"], {"cutoff": plan.cutoff}).fetchone()
    remove = _delete_batches if layout == "plain" else _drop_partitions
    load = Load(url, schema, args.clients)
    await load.start()
    try:
        await asyncio.sleep(min(1.0, args.seconds / 4))
        with console.status(f"{layout}: the load before the removal ..."):
            before = time.perf_counter()
            await asyncio.sleep(args.seconds)
        with console.status(f"{layout}: removing the oldest {plan.removed_days} days ..."):
            removing = time.perf_counter()
            removal = await remove(url, schema, plan.cutoff, args.batch)
            removed = time.perf_counter()
        with console.status(f"{layout}: the load after the removal ..."):
            await asyncio.sleep(args.seconds)
            after = time.perf_counter()
    finally:
        await load.stop()
    ahead, during = load.window(before, removing), load.window(removing, removed)
    removal |= {
        "rows": older,
        "seconds": round(removed - removing, 3),
        "load_before": asdict(ahead),
        "load_during": asdict(during),
        "load_after": asdict(load.window(removed, after)),
        "throughput_vs_before": ratio(during.messages_per_second, ahead.messages_per_second),
        "p50_vs_before": ratio(during.p50_ms, ahead.p50_ms),
        "p99_vs_before": ratio(during.p99_ms, ahead.p99_ms),
    }
    result: dict[str, Any] = {"removal": removal}
    with _connect(url, schema) as conn:
        (left,) = conn.execute(SQL["count_older"], {"cutoff": plan.cutoff}).fetchone()
        removal["rows_left_behind"] = left
        (orphans,) = conn.execute(SQL["orphan_deliveries"]).fetchone()
        removal["deliveries_left_behind"] = orphans
        result["sizes_after_removal"] = _sizes(conn)
        began = time.perf_counter()
        conn.execute(SQL["vacuum"])
        result["vacuum_seconds"] = round(time.perf_counter() - began, 2)
        result["sizes_after_vacuum"] = _sizes(conn)
    console.print(f"{layout}: removed {older:,} messages in {removal['seconds']} s")
    return result


async def _delete_batches(url: str, schema: str, cutoff: datetime, batch: int) -> dict[str, Any]:
    """The retention job's way on today's tables: batches until none is left."""
    batches = 0
    async with await _connect_async(url, schema) as conn:
        while True:
            cursor = await conn.execute(SQL["delete_oldest"], {"cutoff": cutoff, "batch": batch})
            if cursor.rowcount == 0:
                break
            batches += 1
    return {"method": f"DELETE, {batch} messages per transaction", "batches": batches}


async def _drop_partitions(url: str, schema: str, cutoff: datetime, batch: int) -> dict[str, Any]:
    """Whole days: their deliveries first, then each partition detached and dropped."""
    day = cutoff.strftime("%Y%m%d")
    dropped = 0
    async with await _connect_async(url, schema) as conn:
        for parent in ("messages", "message_history"):
            found = await conn.execute(
                SQL["partitions_before"],
                {"parent": f"{schema}.{parent}", "first_kept": f"{parent}_{day}"},
            )
            for (name,) in await found.fetchall():
                partition = sql.Identifier(schema, name)
                if parent == "messages":
                    await conn.execute(_format("delete_partition_deliveries", partition=partition))
                await conn.execute(
                    _format(
                        "detach_partition",
                        parent=sql.Identifier(schema, parent),
                        partition=partition,
                    )
                )
                await conn.execute(_format("drop_table", table=partition))
                dropped += 1
    return {"method": "DETACH PARTITION CONCURRENTLY, DROP TABLE", "partitions": dropped}


def _sizes(conn: psycopg.Connection) -> dict[str, dict[str, int]]:
    rows = conn.execute(SQL["sizes"], {"tables": TABLES}).fetchall()
    return {
        name: {"heap": heap, "indexes": index, "total": total} for name, heap, index, total in rows
    }


def _format(name: str, **identifiers: sql.Composable) -> sql.Composed:
    return sql.SQL(SQL[name]).format(**identifiers)


def _connect(url: str, schema: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True, options=f"-c search_path={schema},coordinator")


async def _connect_async(url: str, schema: str) -> psycopg.AsyncConnection:
    return await psycopg.AsyncConnection.connect(
        url, autocommit=True, options=f"-c search_path={schema},coordinator"
    )


def _drop(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_format("drop_layout", schema=sql.Identifier(schema)))


if __name__ == "__main__":
    main()
