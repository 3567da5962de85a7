"""`coordinator pipeline report`: the transaction lifecycle report.

Reads every half message (live, plus the archive when given), computes the
figures of figures.py per producer group, topic and hour and in total per
producer group and topic, the check-back distribution and the consumer lag,
and writes them as Parquet datasets, PNG charts and one HTML page:

    OUT/figures_hourly/      per producer group, topic and hour of birth (UTC)
    OUT/figures_total/       per producer group and topic
    OUT/check_counts/        messages per check count, per group, topic and hour
    OUT/consumer_lag/        the consumer_lag view at report time
    OUT/charts/*.png
    OUT/report.html
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from coordinator.db.queries import execute_sync
from coordinator.pipeline import charts, report_page
from coordinator.pipeline.figures import (
    HOURLY_KEYS,
    STATES,
    TOTAL_KEYS,
    check_count_distribution,
    lifecycle_figures,
    with_hour,
)
from coordinator.pipeline.progress import JobProgress, QuietProgress
from coordinator.pipeline.tables import (
    MESSAGES,
    read_named,
    read_parquet_dataset,
    transactional_archive,
    utc_wall_clock,
    with_archived,
)

CHART_GROUPS = 15  # the busiest producer group / topic pairs in per-group charts


@dataclass(frozen=True)
class ReportOptions:
    output_dir: Path
    archive_dir: Path | None = None
    as_of: datetime | None = None  # default: the database's now()
    partitions: int = 4


@dataclass
class ReportResult:
    output_dir: Path
    as_of: datetime
    messages: int
    groups: int
    hours: int
    totals: list[dict[str, Any]]
    consumer_lag: list[dict[str, Any]] | None
    html: Path
    charts: list[Path] = field(default_factory=list)


def database_now(url: str) -> datetime:
    with psycopg.connect(url) as conn:
        return execute_sync(conn, "pipeline_now").fetchone()[0]  # type: ignore[index]


def relation_exists(url: str, name: str) -> bool:
    with psycopg.connect(url) as conn:
        row = execute_sync(conn, "pipeline_relation_exists", {"name": name}).fetchone()
    return bool(row and row[0])


def half_messages(
    spark: SparkSession, url: str, archive_dir: Path | None, partitions: int
) -> DataFrame:
    """One row per half message, live and (when given) archived, each offset once."""
    live = read_named(
        spark, url, "pipeline_report_messages", partition_column="id", partitions=partitions
    )
    if archive_dir is None:
        return live
    archived = transactional_archive(read_parquet_dataset(spark, archive_dir, MESSAGES))
    return with_archived(live, archived)


def _write(rows: DataFrame, path: Path) -> None:
    rows.coalesce(1).write.mode("overwrite").parquet(str(path))


def _label(row: dict[str, Any]) -> str:
    return charts.row_label(row["producer_group"], row["topic"])


def _draw_charts(
    out: Path,
    by_hour: list[Any],
    checks: list[Any],
    totals: list[dict[str, Any]],
    lag: list[dict[str, Any]] | None,
) -> list[tuple[str, Path]]:
    out.mkdir(parents=True, exist_ok=True)
    drawn: list[tuple[str, Path]] = []
    if by_hour:
        # Spark hands timestamps to Python in the machine's zone: go by epoch.
        hours = [datetime.fromtimestamp(r["hour_us"] / 1e6, UTC) for r in by_hour]
        counts = {s: [r[s] for r in by_hour] for s in STATES}
        drawn.append(
            (
                "Messages per hour",
                charts.messages_by_hour(hours, counts, out / "messages_by_hour.png"),
            )
        )
    busiest = totals[:CHART_GROUPS]
    if busiest:
        labels = [_label(r) for r in busiest]
        percentiles = {p: [r[f"latency_{p}_s"] for r in busiest] for p in ("p50", "p90", "p99")}
        drawn.append(
            (
                "Resolution latency",
                charts.latency_by_group(labels, percentiles, out / "latency.png"),
            )
        )
        drawn.append(
            (
                "Discard and expiry rates",
                charts.rates_by_group(
                    labels,
                    [r["discard_rate"] for r in busiest],
                    [r["expiry_rate"] for r in busiest],
                    out / "discard_expiry_rates.png",
                ),
            )
        )
    if checks:
        drawn.append(
            (
                "Check-back count distribution",
                charts.check_count_histogram(
                    [r["check_count"] for r in checks],
                    [r["messages"] for r in checks],
                    out / "check_counts.png",
                ),
            )
        )
    pending = [r for r in totals if r["prepared"]][:CHART_GROUPS]
    if pending:
        drawn.append(
            (
                "Pending transactions",
                charts.pending_ages(
                    [_label(r) for r in pending],
                    [r["prepared"] for r in pending],
                    [(r["pending_age_max_s"] or 0) / 3600 for r in pending],
                    out / "pending_ages.png",
                ),
            )
        )
    if lag:
        shown = lag[:CHART_GROUPS]
        drawn.append(
            (
                "Consumer lag",
                charts.consumer_lag(
                    [charts.row_label(r["consumer_group"], r["topic"]) for r in shown],
                    [r["lag"] for r in shown],
                    [r["dead_letters"] for r in shown],
                    out / "consumer_lag.png",
                ),
            )
        )
    return drawn


def run_report(
    spark: SparkSession, url: str, options: ReportOptions, *, progress: JobProgress | None = None
) -> ReportResult:
    progress = progress or QuietProgress()
    out = options.output_dir
    out.mkdir(parents=True, exist_ok=True)
    as_of = options.as_of or database_now(url)

    messages = with_hour(
        half_messages(spark, url, options.archive_dir, options.partitions)
    ).persist()
    try:
        with progress.step("reading half messages"):
            total = messages.count()
        with progress.step("computing figures per producer group, topic and hour"):
            hourly = lifecycle_figures(messages, HOURLY_KEYS, as_of)
            _write(hourly, out / "figures_hourly")
            _write(lifecycle_figures(messages, TOTAL_KEYS, as_of), out / "figures_total")
            _write(check_count_distribution(messages, HOURLY_KEYS), out / "check_counts")
            state_sums = [F.sum((F.col("state") == s).cast("long")).alias(s) for s in STATES]
            by_hour = (
                messages.groupBy(F.unix_micros("hour").alias("hour_us"))
                .agg(*state_sums)
                .orderBy("hour_us")
                .collect()
            )
            checks = (
                messages.groupBy("check_count")
                .agg(F.count(F.lit(1)).alias("messages"))
                .orderBy("check_count")
                .collect()
            )
    finally:
        messages.unpersist()
    totals_frame = spark.read.parquet(str(out / "figures_total"))
    totals = [
        r.asDict()
        for r in totals_frame.orderBy(F.desc("messages"), "producer_group", "topic").collect()
    ]
    hours = spark.read.parquet(str(out / "figures_hourly")).select("hour").distinct().count()

    lag: list[dict[str, Any]] | None = None
    if relation_exists(url, "consumer_lag"):
        with progress.step("reading consumer lag"):
            lag_frame = read_named(spark, url, "pipeline_consumer_lag")
            _write(lag_frame, out / "consumer_lag")
            lag = [
                r.asDict()
                for r in utc_wall_clock(spark.read.parquet(str(out / "consumer_lag")))
                .orderBy(F.desc("lag"), F.desc("dead_letters"), "consumer_group", "topic")
                .collect()
            ]

    with progress.step("drawing charts and writing the HTML report"):
        drawn = _draw_charts(out / "charts", by_hour, checks, totals, lag)
        resolved = sum(r["messages"] - r["prepared"] for r in totals)
        headline = {
            "half messages": f"{total:,}",
            "committed": f"{sum(r['committed'] for r in totals):,}",
            "resolved": f"{resolved:,}",
            "pending": f"{sum(r['prepared'] for r in totals):,}",
            "discarded": f"{sum(r['discarded'] for r in totals):,}",
            "expired": f"{sum(r['expired'] for r in totals):,}",
            "producer groups / topics": f"{len(totals):,}",
        }
        sources = "live tables" + (
            f" and the archive in {options.archive_dir}" if options.archive_dir else ""
        )
        datasets = ["figures_hourly", "figures_total", "check_counts"] + (
            ["consumer_lag"] if lag is not None else []
        )
        page = report_page.render(
            as_of=as_of,
            sources=sources,
            headline=headline,
            charts=drawn,
            totals=totals,
            lag=lag,
            datasets=datasets,
            relative_to=out,
        )
        html = out / "report.html"
        html.write_text(page)
    return ReportResult(
        output_dir=out,
        as_of=as_of,
        messages=total,
        groups=len(totals),
        hours=hours,
        totals=totals,
        consumer_lag=lag,
        html=html,
        charts=[path for _, path in drawn],
    )
