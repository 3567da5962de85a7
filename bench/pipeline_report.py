"""The Spark lifecycle report over a million half messages, against one SQL aggregate.

    python -m bench.pipeline_report                       # 1,000,000 messages, local[*]
    python -m bench.pipeline_report --messages 50000      # smaller
    python -m bench.pipeline_report --database-url postgresql://...   # your server

Generates the messages (synthetic.py), warms PostgreSQL's cache with one
run of the SQL, then times:
- sql: the report's figures as SQL, the named queries
  pipeline_report_reference and pipeline_report_reference_checks (the
  yardstick: what PostgreSQL alone does on this machine);
- spark_report: `coordinator pipeline report` on the same data (reading every
  row through the data source, all figures, Parquet, charts, HTML), without
  the Spark session's start, which is timed apart.
The ratio is spark_report / sql. Absolute numbers are printed and written to
bench/results/pipeline_report.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from rich.console import Console
from rich.table import Table

from bench.database import bench_database
from coordinator.db.queries import query
from coordinator.pipeline.report import ReportOptions, run_report
from coordinator.pipeline.session import spark_session
from coordinator.pipeline.synthetic import generate

console = Console(width=120)
RESULTS = Path(__file__).parent / "results"


def _sql_seconds(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            query("pipeline_report_reference"), {"as_of": datetime.now(UTC)}
        ).fetchall()
        conn.execute(query("pipeline_report_reference_checks")).fetchall()
    return time.perf_counter() - started, len(rows)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="measure this server (default: embedded)")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--partitions", type=int, default=None, help="reads per table")
    parser.add_argument("--out", type=Path, default=RESULTS / "pipeline_report.json")
    args = parser.parse_args(argv)

    result: dict = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "messages": args.messages,
        "master": args.master,
    }
    output = Path(tempfile.mkdtemp(prefix="coordinator-bench-report-"))
    try:
        with bench_database(args.database_url) as database:
            result["database"] = "embedded (pgserver)" if database.embedded else "external"
            with console.status(f"generating {args.messages:,} half messages ..."):
                started = time.perf_counter()
                with psycopg.connect(database.url, autocommit=True) as conn:
                    generate(conn, args.messages, anchor=datetime.now(UTC), span_hours=72)
                    conn.execute("VACUUM ANALYZE messages")
                result["generate_seconds"] = round(time.perf_counter() - started, 2)

            with console.status("SQL aggregate (a warm-up run, then the timed one) ..."):
                _sql_seconds(database.url)
                sql_seconds, groups = _sql_seconds(database.url)
            result["sql_seconds"] = round(sql_seconds, 3)
            result["hourly_rows"] = groups

            started = time.perf_counter()
            with spark_session(args.master, {"spark.ui.enabled": "false"}, "bench") as spark:
                result["spark_start_seconds"] = round(time.perf_counter() - started, 2)
                partitions = args.partitions or 2 * spark.sparkContext.defaultParallelism
                with console.status(f"Spark report ({partitions} reads in parallel) ..."):
                    started = time.perf_counter()
                    report = run_report(
                        spark, database.url, ReportOptions(output, partitions=partitions)
                    )
                    spark_seconds = time.perf_counter() - started
    finally:
        shutil.rmtree(output, ignore_errors=True)

    assert report.messages == args.messages, "the report did not see every message"
    result["partitions"] = partitions
    result["spark_report_seconds"] = round(spark_seconds, 3)
    result["ratio_spark_to_sql"] = round(spark_seconds / sql_seconds, 2)
    result["spark_messages_per_second"] = round(args.messages / spark_seconds)
    result["sql_messages_per_second"] = round(args.messages / sql_seconds)

    table = Table(
        title=f"Lifecycle report over {args.messages:,} half messages ({os.cpu_count()} cores)"
    )
    for column in ("measure", "seconds", "messages/s", "vs SQL"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    table.add_row(
        "SQL aggregate (PostgreSQL alone)",
        f"{sql_seconds:.2f}",
        f"{result['sql_messages_per_second']:,}",
        "1.0x",
    )
    table.add_row(
        f"Spark report, {args.master}",
        f"{spark_seconds:.2f}",
        f"{result['spark_messages_per_second']:,}",
        f"{result['ratio_spark_to_sql']}x",
    )
    table.add_row(
        "Spark session start (once per job)", f"{result['spark_start_seconds']:.2f}", "", ""
    )
    console.print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    console.print(f"written to {args.out}")
    return result


if __name__ == "__main__":
    main()
