"""Does a message cost more when the database holds a long history?

    python -m bench.history_cost                   # 10M resolved messages
    python -m bench.history_cost --rows 1000000    # fewer
    python -m bench.history_cost --quick           # 50k rows, 2-second windows (a smoke test)
    python -m bench.history_cost --database-url postgresql://...   # yours (it creates two
                                                                   # databases on it)

Issue 28's target: with 10M resolved messages in history, single-message
throughput at least 0.9x of the same run on an empty database. Two
databases on one PostgreSQL server, migrated alike: `empty`, and `full`,
filled first with N resolved messages (two history rows each, no
delivery: acked) by set-based SQL (bench/history_cost.sql), then VACUUM
ANALYZE. Then, round by round, a real `coordinator serve` (its defaults:
group commit, the retention job running; nothing of the history is past
its retention) serves one database, then the other, in an order that
alternates (empty first, then full first), each time for a window of
single-message load: `--concurrency` producers over HTTP, each preparing
and committing one message per request, as bench.ab's single-message
figure does (bench/http_load.py; a consumer group is subscribed and
nobody consumes, so each commit also writes a delivery). The figure that
counts is the full/empty ratio within each round, summarised by its
median: a drift of the shared machine hits both sides of a round alike.
Writes bench/results/history_cost.json (`--json` prints it too).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from rich.console import Console

from bench.database import bench_database, on_database
from bench.http_load import BODY, GROUP, TOPIC, run_single
from bench.run import load_figures
from bench.server import coordinator_process
from coordinator.db import migrate
from coordinator.db.queries import parse_queries

console = Console(width=120)
RESULTS = Path(__file__).parent / "results"
SQL = parse_queries((Path(__file__).parent / "history_cost.sql").read_text())
SIDES = ("empty", "full")
FILL_CHUNK = 250_000
# The history's time span, ending an hour ago: well inside the default
# retention (72 h), so the retention job running in the server keeps it all.
SPAN = timedelta(hours=48)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.history_cost", description=__doc__)
    parser.add_argument("--database-url", help="a server to create the two databases on")
    parser.add_argument("--rows", type=int, default=10_000_000, help="resolved messages")
    parser.add_argument("--seconds", type=float, default=10.0, help="each load window")
    parser.add_argument("--rounds", type=int, default=4, help="windows per database")
    parser.add_argument("--concurrency", type=int, default=16, help="producer connections")
    parser.add_argument("--quick", action="store_true", help="50k rows, 1 round of 2 s windows")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--out", type=Path, default=RESULTS / "history_cost.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.seconds, args.rounds = min(args.rows, 50_000), 2.0, 1
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    with bench_database(args.database_url) as database, two_databases(database.url) as urls:
        fill = _fill(urls["full"], args.rows)
        rounds = [_round(number, urls, args) for number in range(1, args.rounds + 1)]
        tables = {side: _figures(url) for side, url in urls.items()}
    report = {
        "date": started_at,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average": round(os.getloadavg()[0], 2),
        },
        "settings": {
            "rows": args.rows,
            "seconds": args.seconds,
            "rounds": args.rounds,
            "concurrency": args.concurrency,
        },
        "fill": fill,
        "tables_at_end": tables,
        "rounds": rounds,
        "summary": _summary(rounds),
    }
    _print(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        console.print(f"written to {args.out}")
    return report


@contextmanager
def two_databases(url: str) -> Iterator[dict[str, str]]:
    """Databases `history_empty` and `history_full` on the server of `url`, migrated,
    dropped at the end."""
    admin = psycopg.connect(url, autocommit=True)

    def drop(name: str) -> None:
        statement = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        admin.execute(statement.format(sql.Identifier(name)))

    urls: dict[str, str] = {}
    try:
        template = None
        for side in SIDES:
            name = f"history_{side}"
            drop(name)
            create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
            if template is not None:
                # A copy of the first, migrated one: alike, and quicker than migrating.
                create += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
            admin.execute(create)
            urls[side] = on_database(url, name)
            if template is None:
                migrate.upgrade(urls[side])
                template = name
        yield urls
    finally:
        for side in SIDES:
            with suppress(psycopg.Error):
                drop(f"history_{side}")
        admin.close()


def _fill(url: str, rows: int) -> dict[str, Any]:
    began = time.perf_counter()
    start = datetime.now(UTC) - timedelta(hours=1) - SPAN
    step = SPAN.total_seconds() / max(rows, 1)
    with psycopg.connect(url, autocommit=True) as conn:
        for first in range(1, rows + 1, FILL_CHUNK):
            last = min(rows, first + FILL_CHUNK - 1)
            with console.status(f"full: filling messages {first:,}-{last:,} of {rows:,} ..."):
                conn.execute(
                    SQL["fill"],
                    {
                        "first": first,
                        "last": last,
                        "total": rows,
                        "start": start,
                        "step": step,
                        "producer_group": GROUP,
                        "topic": TOPIC,
                        "body": BODY,
                    },
                )
        filled = time.perf_counter()
        with console.status("full: VACUUM ANALYZE ..."):
            conn.execute(SQL["vacuum"])
    done = time.perf_counter()
    console.print(
        f"full: {rows:,} messages filled in {filled - began:.0f} s, "
        f"vacuumed in {done - filled:.0f} s"
    )
    return {
        "rows": rows,
        "fill_seconds": round(filled - began, 1),
        "vacuum_seconds": round(done - filled, 1),
    }


def _figures(url: str) -> dict[str, dict[str, int]]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(SQL["figures"]).fetchall()
    return {name: {"rows_estimate": n, "bytes": size} for name, n, size in rows}


def _round(number: int, urls: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    order = SIDES if number % 2 else SIDES[::-1]
    measured: dict[str, Any] = {"round": number, "order": list(order)}
    for side in order:
        with (
            psycopg.connect(urls[side], autocommit=True) as conn,
            coordinator_process(urls[side]) as server,
            console.status(f"round {number}: {side}, {args.concurrency} producers ..."),
        ):
            before = _io(conn)
            result = run_single(server.url, concurrency=args.concurrency, seconds=args.seconds)
            after = _io(conn)
        io = {
            f"{name}_per_message": round((after[name] - before[name]) / max(result.messages, 1), 2)
            for name in after
        }
        measured[side] = load_figures(result) | io | {"load_average": round(os.getloadavg()[0], 2)}
        console.print(
            f"round {number}, {side}: {result.messages_per_second:,.0f} msgs/s, "
            f"p50 {result.percentile(50):.1f} ms, WAL {io['wal_bytes_per_message']:,.0f} B "
            f"({io['wal_fpi_per_message']} full pages) and "
            f"{io['blks_read_per_message']} blocks read per message"
        )
    measured["full_vs_empty"] = round(
        measured["full"]["messages_per_second"] / measured["empty"]["messages_per_second"], 3
    )
    return measured


def _io(conn: psycopg.Connection) -> dict[str, int]:
    row = conn.execute(SQL["io"]).fetchone()
    assert row is not None
    return dict(
        zip(("wal_records", "wal_fpi", "wal_bytes", "blks_read", "blks_hit"), row, strict=True)
    )


def _summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = [r["full_vs_empty"] for r in rounds]
    summary: dict[str, Any] = {
        side: {
            "messages_per_second": round(
                statistics.median(r[side]["messages_per_second"] for r in rounds), 1
            ),
            "p50_ms": round(statistics.median(r[side]["p50_ms"] for r in rounds), 2),
            **{
                figure: round(statistics.median(r[side][figure] for r in rounds), 2)
                for figure in (
                    "wal_bytes_per_message",
                    "wal_fpi_per_message",
                    "blks_read_per_message",
                )
            },
        }
        for side in SIDES
    }
    summary["full_vs_empty"] = {
        "median": round(statistics.median(ratios), 3),
        "min": min(ratios),
        "max": max(ratios),
    }
    summary["target"] = 0.9
    summary["passed"] = summary["full_vs_empty"]["median"] >= 0.9
    return summary


def _print(report: dict[str, Any]) -> None:
    summary = report["summary"]
    ratio = summary["full_vs_empty"]
    console.print(
        f"{report['settings']['rows']:,} resolved messages: "
        f"empty {summary['empty']['messages_per_second']:,.0f} msgs/s "
        f"(p50 {summary['empty']['p50_ms']} ms), "
        f"full {summary['full']['messages_per_second']:,.0f} msgs/s "
        f"(p50 {summary['full']['p50_ms']} ms); full/empty per round: median "
        f"{ratio['median']}x (min {ratio['min']}x, max {ratio['max']}x; target >= 0.9x: "
        f"{'met' if summary['passed'] else 'missed'})"
    )


if __name__ == "__main__":
    main()
