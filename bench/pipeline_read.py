"""The pipeline's read path alone: rows per second from PostgreSQL into Spark, by each reader.

    python -m bench.pipeline_read                        # 1,000,000 messages, local[2]
    python -m bench.pipeline_read --messages 100000      # smaller
    python -m bench.pipeline_read --database-url postgresql://...   # your server

Without --database-url it starts an embedded PostgreSQL that listens on its
UNIX socket and on 127.0.0.1 (bench/tcp_postgres.py), so the same data is read
every way. It generates the messages (synthetic.py) and, with the Spark
session already started (its start is timed apart), reads the report's input
(`pipeline_report_messages`, every column, split into id ranges like the
report) into Spark's `noop` sink, which makes Spark take every value of every
row and keep nothing. After a warm-up run each, the readers take turns,
`--repeat` times; each one's best run counts, and the CPU seconds of a run
(Spark's JVM and Python workers; the PostgreSQL server when it runs here),
which other work on the machine disturbs much less than the seconds. Readers:
- rows: the coordinator_postgres source's `rows` reader (psycopg's cursor, a
  Python object per value, then Arrow): the pipeline's read path before the
  columnar one, kept as the yardstick;
- arrow: the coordinator_postgres source (adbc-driver-postgresql: binary COPY
  decoded into Arrow in C++), over the UNIX socket and over TCP;
- jdbc: Spark's JDBC source with Debian's driver jar, over TCP (only when the
  URL is TCP and the jar is installed).
Every reader must read the same rows (count and sum of ids, checked untimed).
The rows/s and each one's ratio to `rows` are printed and written to
bench/results/pipeline_read.json.

`measure_read` is the same measurement for other benchmarks
(bench/pipeline_report.py): the read path the pipeline uses for a URL.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil
import psycopg
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from rich.console import Console
from rich.table import Table

from bench import jdbc_read as jdbc
from bench.database import bench_database
from bench.tcp_postgres import tcp_postgres
from coordinator.db import migrate
from coordinator.db.queries import query
from coordinator.pipeline.session import spark_session
from coordinator.pipeline.source import FORMAT, ReadSpec
from coordinator.pipeline.synthetic import generate
from coordinator.pipeline.tables import read_named

console = Console(width=120)
RESULTS = Path(__file__).parent / "results"
QUERY = "pipeline_report_messages"


@dataclass(frozen=True)
class ReadMeasure:
    reader: str  # rows, arrow, jdbc, or "pipeline" (the pipeline's own read path)
    transport: str  # socket or tcp
    rows: int
    seconds: float  # the best run
    partitions: int
    # CPU seconds of one run (the least of the runs): Spark's JVM and Python
    # workers, and the PostgreSQL server when it runs on this machine. Unlike
    # the seconds, they hardly change when other work shares the cores.
    spark_cpu_seconds: float
    postgres_cpu_seconds: float | None

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def _cpu_seconds(process: psutil.Process) -> float:
    """A process's CPU and that of its children, ended ones included, and their trees."""
    total = 0.0
    for each in [process, *process.children(recursive=True)]:
        try:
            times = each.cpu_times()
        except psutil.Error:
            continue  # ended meanwhile: counted in its parent's children_* times
        total += times.user + times.system + times.children_user + times.children_system
    return total


@dataclass(frozen=True)
class _CpuMeter:
    postmaster: int | None

    @classmethod
    def of(cls, url: str) -> _CpuMeter:
        """The meter of the server behind url: its postmaster, when it runs on this machine."""
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            try:
                # While the connection is open: its backend's parent is the postmaster.
                parent = psutil.Process(row[0]).parent() if row else None
            except psutil.Error:
                parent = None
        # None: a server on another machine (a process here of the same pid is no postgres)
        return cls(parent.pid if parent and "postgres" in parent.name() else None)

    def read(self) -> tuple[float, float | None]:
        spark = _cpu_seconds(psutil.Process())  # the JVM and its Python workers are children
        if self.postmaster is None:
            return spark, None
        try:
            return spark, _cpu_seconds(psutil.Process(self.postmaster))
        except psutil.Error:
            return spark, None


def _transport(url: str) -> str:
    return "tcp" if jdbc.jdbc_connection(url) is not None else "socket"


def _source(spark: SparkSession, url: str, partitions: int, reader: str) -> DataFrame:
    return (
        spark.read.format(FORMAT)
        .option("url", url)
        .option("query", query(QUERY))
        .option("partition_column", "id")
        .option("num_partitions", partitions)
        .option("reader", reader)
        .load()
    )


def _jdbc(spark: SparkSession, url: str, partitions: int) -> DataFrame:
    options = {
        "url": url,
        "query": query(QUERY),
        "partition_column": "id",
        "num_partitions": str(partitions),
    }
    return jdbc.read_jdbc(spark, ReadSpec.from_options(options))


def _pipeline(spark: SparkSession, url: str, partitions: int) -> DataFrame:
    return read_named(spark, url, QUERY, partition_column="id", partitions=partitions)


def _frame_maker(reader: str) -> Callable[[SparkSession, str, int], DataFrame]:
    if reader == "jdbc":
        return _jdbc
    if reader == "pipeline":
        return _pipeline
    return lambda spark, url, partitions: _source(spark, url, partitions, reader)


def fingerprint(frame: DataFrame) -> tuple[int, int]:
    """(rows, sum of ids): what every reader must agree on."""
    row = frame.agg(F.count(F.lit(1)), F.sum("id")).collect()[0]
    return int(row[0]), int(row[1] or 0)


def measure_reads(
    spark: SparkSession,
    runs: list[tuple[str, str]],
    *,
    partitions: int | None = None,
    repeat: int = 3,
) -> list[ReadMeasure]:
    """Each (reader, url) read into Spark's noop sink repeat times, after a warm-up run.

    The readers take turns, so that a machine busier at one moment than the
    next does not favour one of them.
    """
    partitions = partitions or 2 * spark.sparkContext.defaultParallelism
    rows = {run: fingerprint(_frame_maker(run[0])(spark, run[1], partitions))[0] for run in runs}
    meters = {run: _CpuMeter.of(run[1]) for run in runs}
    seconds: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
    spark_cpu: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
    postgres_cpu: dict[tuple[str, str], list[float]] = {run: [] for run in runs}
    for _ in range(max(1, repeat)):
        for run in runs:
            frame = _frame_maker(run[0])(spark, run[1], partitions)
            spark_before, postgres_before = meters[run].read()
            started = time.perf_counter()
            frame.write.format("noop").mode("overwrite").save()
            seconds[run].append(time.perf_counter() - started)
            spark_after, postgres_after = meters[run].read()
            spark_cpu[run].append(spark_after - spark_before)
            if postgres_before is not None and postgres_after is not None:
                postgres_cpu[run].append(postgres_after - postgres_before)
    return [
        ReadMeasure(
            run[0],
            _transport(run[1]),
            rows[run],
            min(seconds[run]),
            partitions,
            min(spark_cpu[run]),
            min(postgres_cpu[run]) if postgres_cpu[run] else None,
        )
        for run in runs
    ]


def measure_read(
    spark: SparkSession,
    url: str,
    *,
    reader: str = "pipeline",
    partitions: int | None = None,
    repeat: int = 3,
) -> ReadMeasure:
    """Rows/s of reading the report's input (every column) into Spark's noop sink.

    The best of `repeat` runs after a warm-up one. reader: "pipeline" (the
    pipeline's own read path, read_named), "arrow", "rows" or "jdbc". The
    session must be running; its start is not counted.
    """
    (measured,) = measure_reads(spark, [(reader, url)], partitions=partitions, repeat=repeat)
    return measured


@dataclass(frozen=True)
class _Database:
    socket_url: str | None
    tcp_url: str | None
    embedded: bool


@contextmanager
def _database(url: str | None) -> Iterator[_Database]:
    if url:
        with bench_database(url):
            tcp = url if _transport(url) == "tcp" else None
            yield _Database(None if tcp else url, tcp, embedded=False)
        return
    with tcp_postgres(prefix="coordinator-bench-read-") as server:
        server.create_database("bench")
        migrate.upgrade(server.socket_url("bench"))
        yield _Database(server.socket_url("bench"), server.tcp_url("bench"), embedded=True)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="measure this server (default: embedded)")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=None, help="[2 per Spark core]")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per reader (best)")
    parser.add_argument("--out", type=Path, default=RESULTS / "pipeline_read.json")
    args = parser.parse_args(argv)

    result: dict = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "messages": args.messages,
        "master": args.master,
        "query": QUERY,
    }
    conf = {"spark.ui.enabled": "false"}
    if jdbc.JAR.is_file():
        conf["spark.jars"] = str(jdbc.JAR)
    measures: list[ReadMeasure] = []
    with _database(args.database_url) as database:
        any_url = database.socket_url or database.tcp_url
        assert any_url is not None
        result["database"] = "embedded (pgserver)" if database.embedded else "external"
        with console.status(f"generating {args.messages:,} half messages ..."):
            started = time.perf_counter()
            with psycopg.connect(any_url, autocommit=True) as conn:
                generate(conn, args.messages, anchor=datetime.now(UTC), span_hours=72)
                conn.execute("VACUUM ANALYZE messages")
            result["generate_seconds"] = round(time.perf_counter() - started, 2)

        started = time.perf_counter()
        with spark_session(args.master, conf, "bench-read") as spark:
            result["spark_start_seconds"] = round(time.perf_counter() - started, 2)
            runs: list[tuple[str, str]] = []
            for url in (database.socket_url, database.tcp_url):
                if url is not None:
                    runs += [("rows", url), ("arrow", url)]
            if database.tcp_url is not None and jdbc.driver_available(spark):
                runs.append(("jdbc", database.tcp_url))
            with console.status(f"reading with {len(runs)} readers, {args.repeat} times each ..."):
                measures = measure_reads(
                    spark, runs, partitions=args.partitions, repeat=args.repeat
                )
            fingerprints = {
                (reader, _transport(url)): fingerprint(_frame_maker(reader)(spark, url, 2))
                for reader, url in runs
            }
    if len(set(fingerprints.values())) != 1:
        raise SystemExit(f"the readers disagree on the rows: {fingerprints}")
    if any(m.rows != args.messages for m in measures):
        raise SystemExit("a reader did not see every message")

    baseline = {m.transport: m.rows_per_second for m in measures if m.reader == "rows"}
    result["reads"] = [
        {
            **asdict(m),
            "seconds": round(m.seconds, 3),
            "rows_per_second": round(m.rows_per_second),
            "vs_rows": round(m.rows_per_second / baseline[m.transport], 2)
            if m.transport in baseline
            else None,
            "spark_cpu_seconds": round(m.spark_cpu_seconds, 2),
            "postgres_cpu_seconds": None
            if m.postgres_cpu_seconds is None
            else round(m.postgres_cpu_seconds, 2),
        }
        for m in measures
    ]
    _print(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    console.print(f"written to {args.out}")
    return result


def _print(result: dict) -> None:
    table = Table(
        title=f"Reading {result['messages']:,} messages into Spark ({result['master']}, "
        f"{result['machine']['cpus']} cores; session start {result['spark_start_seconds']} s, "
        "not counted)"
    )
    columns = (
        "reader",
        "transport",
        "partitions",
        "seconds",
        "rows/s",
        "vs rows",
        "CPU s: Spark",
        "PostgreSQL",
    )
    for column in columns:
        table.add_column(column, justify="left" if column in ("reader", "transport") else "right")
    for read in result["reads"]:
        postgres = read["postgres_cpu_seconds"]
        table.add_row(
            read["reader"],
            read["transport"],
            str(read["partitions"]),
            f"{read['seconds']:.2f}",
            f"{read['rows_per_second']:,}",
            f"{read['vs_rows']}x" if read["vs_rows"] is not None else "",
            f"{read['spark_cpu_seconds']:.2f}",
            "" if postgres is None else f"{postgres:.2f}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
