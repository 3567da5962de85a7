"""The lifecycle report against one SQL aggregate, at 1M and 5M half messages.

    python -m bench.pipeline_report                          # 1,000,000 and 5,000,000, local[*]
    python -m bench.pipeline_report --messages 200000        # one smaller size
    python -m bench.pipeline_report --database-url postgresql://...   # your server

For each size (the table grows from one to the next, so the larger size's
generation adds the difference) it generates half messages over 72 hours
(synthetic.py) and commits the prepared ones born more than 2 hours ago, as
their producers would have (so that older hours are closed, as in life).
Then, with PostgreSQL's cache warm (one untimed run of the SQL first):

- sql: the report's figures as SQL: the named queries pipeline_report_reference
  (per hour), ..._totals and ..._checks; the yardstick;
- report: `coordinator pipeline report --full` run as a command, wall time
  (what a scheduler waits for), on the default engine (in-process: no master
  is named) and as a Spark job (`--engine spark --master local[*]`, Spark's
  start included); every figure of each must equal SQL's (checked before
  anything is printed);
- read: the read path alone, rows/s into Spark's noop sink
  (bench/pipeline_read.py's measure_read), in this process's Spark session;
- phases: the same report inside that (warm) session, each step timed, and
  the session's own start (Spark's fixed cost, paid once per job); and the
  in-process engine's steps;
- incremental: 0.5% more messages born now and some pending ones resolved,
  then `coordinator pipeline report` again on the first one's state: wall
  time and the rows it read; its figures must equal SQL's again.

A small data set (`--small`, 3,000 messages) is reported on the embedded
default: `coordinator --data-dir DIR pipeline report`, wall time, on both
engines.

The machine's load average before and after is recorded: on a shared
machine, other work slows Spark (several processes) more than PostgreSQL.
Results are printed and written to bench/results/pipeline_report.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from rich.console import Console
from rich.table import Table

from bench.database import bench_database
from bench.report_figures import assert_equal_figures, sql_figures
from coordinator.db import migrate
from coordinator.db.embedded import start_embedded
from coordinator.pipeline.report import ReportOptions, run_report
from coordinator.pipeline.session import spark_session
from coordinator.pipeline.synthetic import generate

console = Console(width=120)
RESULTS = Path(__file__).parent / "results"
COMMAND = str(Path(sys.executable).parent / "coordinator")
SPAN_HOURS = 72
SETTLED_AFTER = timedelta(hours=2)
NEW_SHARE = 0.005  # messages added before the incremental rerun
SMALL = 3_000


# --- data -----------------------------------------------------------------------------------


def _settle(conn: psycopg.Connection) -> None:
    """Commit the half messages born more than SETTLED_AFTER ago, as their producers would
    have, with the history row of it: only the last hours still have pending ones."""
    conn.execute(
        """
        WITH settled AS (
            UPDATE messages
            SET state = 'committed', resolved_at = born_at + interval '2 seconds',
                resolution_source = 'client', next_check_at = NULL
            WHERE state = 'prepared' AND born_at < now() - %s::interval
            RETURNING id, resolved_at
        )
        INSERT INTO message_history (message_offset, at, source, from_state, to_state)
        SELECT id, resolved_at, 'client', 'prepared', 'committed' FROM settled
        """,
        (SETTLED_AFTER,),
    )


def _grow(url: str, have: int, want: int, anchor: datetime, seed: int) -> float:
    """Add messages until the table holds `want`; seconds taken."""
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        if want > have:
            generate(conn, want - have, anchor=anchor, span_hours=SPAN_HOURS, seed=seed)
        _settle(conn)
        conn.execute("VACUUM ANALYZE messages")
    return time.perf_counter() - started


def _changes(url: str, messages: int, seed: int) -> int:
    """New messages born now, and half of the pending ones resolved; how many were added."""
    added = max(1, int(messages * NEW_SHARE))
    with psycopg.connect(url, autocommit=True) as conn:
        now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        generate(conn, added, anchor=now, span_hours=0.25, seed=seed)
        conn.execute(
            "UPDATE messages SET state = 'committed', resolved_at = now(), "
            "resolution_source = 'client', next_check_at = NULL "
            "WHERE state = 'prepared' AND id % 2 = 0"
        )
    return added


# --- the report as a command -----------------------------------------------------------------


@dataclass(frozen=True)
class CommandRun:
    seconds: float
    database_rows: int
    reused_hours: int
    output: str


_READ = re.compile(r"read ([\d,]+) rows from PostgreSQL(?:; ([\d,]+) closed hours reused)?")


def run_command(args: list[str], env: dict[str, str] | None = None) -> CommandRun:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
    environment.update(env or {}, NO_COLOR="1", PYSPARK_PYTHON=sys.executable)
    started = time.perf_counter()
    done = subprocess.run(
        [COMMAND, *args], env=environment, capture_output=True, text=True, timeout=3600
    )
    seconds = time.perf_counter() - started
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    found = _READ.search(output)
    assert found, output
    return CommandRun(
        seconds,
        int(found.group(1).replace(",", "")),
        int((found.group(2) or "0").replace(",", "")),
        output,
    )


def report_command(url: str, out: Path, as_of: datetime, *flags: str) -> CommandRun:
    return run_command(
        [
            *("--database-url", url, "pipeline", "report"),
            *("-o", str(out), "--as-of", as_of.isoformat(), *flags),
        ]
    )


# --- one size --------------------------------------------------------------------------------


def _database_now(url: str) -> datetime:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]


def _best_report(
    url: str, messages: int, out: Path, as_of: datetime, repeat: int, *flags: str
) -> CommandRun:
    wall = min(
        (report_command(url, out / str(n), as_of, "--full", *flags) for n in range(repeat)),
        key=lambda run: run.seconds,
    )
    assert wall.database_rows == messages, wall.output
    return wall


def measure_size(
    spark: Any, url: str, messages: int, work: Path, partitions: int, repeat: int, master: str
) -> dict:
    from bench.pipeline_read import measure_read

    result: dict[str, Any] = {"messages": messages}
    as_of = _database_now(url)
    sql_figures(url, as_of)  # warm PostgreSQL's cache
    sql = min((sql_figures(url, as_of) for _ in range(repeat)), key=lambda s: s.seconds)
    result["sql_seconds"] = round(sql.seconds, 3)
    result["hourly_rows"] = len(sql.hourly)

    wall = _best_report(url, messages, work / "cli", as_of, repeat)
    assert "in this process (no Spark)" in wall.output, wall.output
    result["figures_compared"] = assert_equal_figures(work / "cli" / "0", sql)
    result["report_seconds"] = round(wall.seconds, 3)
    result["ratio_report_to_sql"] = round(wall.seconds / sql.seconds, 2)
    on_spark = _best_report(
        url, messages, work / "spark", as_of, repeat, "--engine", "spark", "--master", master
    )
    assert "with Spark" in on_spark.output, on_spark.output
    result["spark_figures_compared"] = assert_equal_figures(work / "spark" / "0", sql)
    result["spark_report_seconds"] = round(on_spark.seconds, 3)
    result["ratio_spark_report_to_sql"] = round(on_spark.seconds / sql.seconds, 2)

    read = measure_read(spark, url, partitions=partitions, repeat=repeat)
    result["read"] = {
        "reader": read.reader,
        "rows": read.rows,
        "seconds": round(read.seconds, 3),
        "rows_per_second": round(read.rows_per_second),
    }
    started = time.perf_counter()
    warm = run_report(
        spark, url, ReportOptions(work / "warm", as_of=as_of, partitions=partitions, full=True)
    )
    result["report_in_session_seconds"] = round(time.perf_counter() - started, 3)
    result["phases"] = {step: round(seconds, 3) for step, seconds in warm.timings.items()}
    in_process = run_report(
        None,
        url,
        ReportOptions(work / "in-process", as_of=as_of, partitions=os.cpu_count() or 1, full=True),
    )
    result["phases_in_process"] = {k: round(v, 3) for k, v in in_process.timings.items()}

    added = _changes(url, messages, seed=messages + 7)
    as_of = _database_now(url)
    rerun = report_command(url, work / "cli" / "0", as_of)
    result["incremental"] = {
        "messages_added": added,
        "seconds": round(rerun.seconds, 3),
        "rows_read": rerun.database_rows,
        "closed_hours_reused": rerun.reused_hours,
    }
    after = sql_figures(url, as_of)
    result["incremental"]["figures_compared"] = assert_equal_figures(work / "cli" / "0", after)
    return result


def measure_small(messages: int, repeat: int) -> dict:
    """`coordinator --data-dir DIR pipeline report` over a few thousand messages."""
    data_dir = Path(tempfile.mkdtemp(prefix="coordinator-bench-small-"))
    try:
        url = start_embedded(data_dir)
        migrate.upgrade(url)
        with psycopg.connect(url, autocommit=True) as conn:
            generate(conn, messages, anchor=datetime.now(UTC), span_hours=SPAN_HOURS)

        def best(*flags: str) -> float:
            runs = [
                run_command(
                    [
                        *("--data-dir", str(data_dir), "pipeline", "report"),
                        *("-o", str(data_dir / f"r{n}"), "--full", *flags),
                    ]
                )
                for n in range(repeat)
            ]
            return round(min(run.seconds for run in runs), 3)

        return {
            "messages": messages,
            "report_seconds": best(),
            "spark_report_seconds": best("--engine", "spark"),
        }
    finally:
        _stop_embedded(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


def _stop_embedded(data_dir: Path) -> None:
    import pgserver

    pgdata = (data_dir / "pgdata").resolve()
    if pgdata.is_dir():
        pgserver.get_server(pgdata).cleanup()


@contextmanager
def _workspace() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="coordinator-bench-report-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _print(result: dict) -> None:
    table = Table(title=f"Lifecycle report vs one SQL aggregate ({os.cpu_count()} cores)")
    for column in (
        "messages",
        "SQL s",
        "report s",
        "vs SQL",
        "Spark s",
        "vs SQL",
        "Spark read rows/s",
        "rerun s",
        "rerun rows",
    ):
        table.add_column(column, justify="right")
    for size in result["sizes"]:
        table.add_row(
            f"{size['messages']:,}",
            f"{size['sql_seconds']:.2f}",
            f"{size['report_seconds']:.2f}",
            f"{size['ratio_report_to_sql']}x",
            f"{size['spark_report_seconds']:.2f}",
            f"{size['ratio_spark_report_to_sql']}x",
            f"{size['read']['rows_per_second']:,}",
            f"{size['incremental']['seconds']:.2f}",
            f"{size['incremental']['rows_read']:,}",
        )
    console.print(table)
    small = result["small"]
    console.print(
        "report s: the command on its default engine (in-process, no master named); "
        "Spark s: with --engine spark, Spark's start included. "
        f"Spark session start: {result['spark_start_seconds']:.2f} s; report over "
        f"{small['messages']:,} messages on the embedded default: "
        f"{small['report_seconds']:.2f} s (Spark: {small['spark_report_seconds']:.2f} s); "
        f"load average {result['load_before']} before, {result['load_after']} after"
    )
    for size in result["sizes"]:
        console.print(f"{size['messages']:,}: phases in a warm Spark session {size['phases']}")
        console.print(f"{size['messages']:,}: phases in-process {size['phases_in_process']}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="measure this server (default: embedded)")
    parser.add_argument("--messages", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--small", type=int, default=SMALL, help="the small data set (0: skip)")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--partitions", type=int, default=None, help="reads per table")
    parser.add_argument("--repeat", type=int, default=2, help="timed runs of each (best)")
    parser.add_argument("--out", type=Path, default=RESULTS / "pipeline_report.json")
    args = parser.parse_args(argv)

    result: dict[str, Any] = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "master": args.master,
        "load_before": _load(),
    }
    if args.small:
        with console.status(f"report over {args.small:,} messages, embedded default ..."):
            result["small"] = measure_small(args.small, args.repeat)
    with bench_database(args.database_url) as database, _workspace() as work:
        result["database"] = "embedded (pgserver)" if database.embedded else "external"
        started = time.perf_counter()
        with spark_session(args.master, {"spark.ui.enabled": "false"}, "bench") as spark:
            result["spark_start_seconds"] = round(time.perf_counter() - started, 2)
            partitions = args.partitions or 2 * spark.sparkContext.defaultParallelism
            result["partitions"] = partitions
            sizes: list[dict[str, Any]] = []
            have = 0
            for messages in sorted(args.messages):
                with console.status(f"{messages:,} messages: generating ..."):
                    generated = _grow(
                        database.url, have, messages, datetime.now(UTC), seed=len(sizes) + 1
                    )
                    have = messages
                with console.status(f"{messages:,} messages: SQL, report, read, rerun ..."):
                    size = measure_size(
                        spark,
                        database.url,
                        messages,
                        work / str(messages),
                        partitions,
                        args.repeat,
                        args.master,
                    )
                size["generate_seconds"] = round(generated, 2)
                have += size["incremental"]["messages_added"]
                sizes.append(size)
                console.print(f"{messages:,} messages measured", highlight=False)
            result["sizes"] = sizes
    result["load_after"] = _load()
    result.setdefault("small", {"messages": 0, "report_seconds": 0.0, "spark_report_seconds": 0.0})
    _print(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    console.print(f"written to {args.out}")
    return result


if __name__ == "__main__":
    main()
