"""`coordinator pipeline report`: the transaction lifecycle report.

Reads the half messages (live, plus the archive when given), computes the
figures of figures.py per producer group, topic and hour and in total per
producer group and topic, the check-back distribution and the consumer lag,
and writes them as Parquet datasets, PNG charts and one HTML page:

    OUT/figures_hourly/      per producer group, topic and hour of birth (UTC)
    OUT/figures_total/       per producer group and topic
    OUT/check_counts/        messages per check count, per group, topic and hour
    OUT/consumer_lag/        the consumer_lag view at report time
    OUT/charts/*.png
    OUT/report.html
    STATE (default OUT/_state/)   the closed hours' partial figures (state.py)

Incremental: the rows of hours closed at a previous run are not read again
(unless one of their messages changed since); their stored partials stand in
for them. The rest (input.py: PostgreSQL by ranges of born_at, the
archive by its birth-date partitions) is read and reduced to partial figures
by one Spark job (spark.py) or by threads of this process
(arrow.py, no JVM); this process rolls everything up and writes the
outputs.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from coordinator.db.queries import execute_sync
from coordinator.pipeline import charts
from coordinator.pipeline.figures import STATES, Rollup, rollup
from coordinator.pipeline.progress import JobProgress, QuietProgress, StepTimes
from coordinator.pipeline.report import arrow, page
from coordinator.pipeline.report import state as states
from coordinator.pipeline.report.input import report_input

if TYPE_CHECKING:  # Spark is one of two engines: imported when a session is given
    from pyspark.sql import SparkSession

SPARK = "spark"
IN_PROCESS = "in-process"
CHART_GROUPS = 15  # the busiest producer group / topic pairs in per-group charts
STATE_DIR = "_state"
LAG_SCHEMA = pa.schema(
    [
        ("consumer_group", pa.string()),
        ("topic", pa.string()),
        ("lag", pa.int64()),
        ("in_flight", pa.int64()),
        ("dead_letters", pa.int64()),
        ("oldest_pending_at", pa.timestamp("us", tz="UTC")),
    ]
)


@dataclass(frozen=True)
class ReportOptions:
    output_dir: Path
    archive_dir: Path | None = None
    as_of: datetime | None = None  # default: the database's now()
    partitions: int = 4
    state_dir: Path | None = None  # default: output_dir / "_state"
    full: bool = False  # recompute every hour, whatever is stored


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
    # what this run read: rows from PostgreSQL, rows of the archive in the
    # hours it read, and the archive's birth-date partitions it opened
    database_rows: int = 0
    archive_rows: int = 0
    archive_days: list[str] = field(default_factory=list)
    full: bool = True
    reason: str = ""  # why every hour was read, or which hours were
    hours_reused: int = 0  # closed hours taken from the state, not read
    state_dir: Path | None = None
    timings: dict[str, float] = field(default_factory=dict)  # seconds per step
    engine: str = ""  # SPARK or IN_PROCESS


@dataclass(frozen=True)
class DatabaseFacts:
    now: datetime
    identity: str


def database_now(url: str) -> datetime:
    """The database's clock as far as what it holds is complete: its now() on a primary,
    less its replication lag on a standby (read_database_url), so that hours are closed
    and ages counted by what the rows read say."""
    with psycopg.connect(url) as conn:
        return _value(execute_sync(conn, "data_complete_until"))


def _database_facts(url: str) -> DatabaseFacts:
    with psycopg.connect(url) as conn:
        now = _value(execute_sync(conn, "data_complete_until"))
        identity = _value(execute_sync(conn, "pipeline_database_identity"))
    return DatabaseFacts(now=now, identity=identity)


def _value(cursor: psycopg.Cursor[Any]) -> Any:
    """The one value of a statement that returns one row of one column."""
    row = cursor.fetchone()
    assert row is not None
    return row[0]


def _unsettled_hours(url: str, since: datetime, until: datetime) -> list[datetime]:
    with psycopg.connect(url) as conn:
        rows = execute_sync(
            conn, "pipeline_report_unsettled_hours", {"since": since, "until": until}
        ).fetchall()
    return [hour.replace(tzinfo=UTC) for (hour,) in rows]


def relation_exists(url: str, name: str) -> bool:
    with psycopg.connect(url) as conn:
        row = execute_sync(conn, "pipeline_relation_exists", {"name": name}).fetchone()
    return bool(row and row[0])


def _write_dataset(table: pa.Table, path: Path) -> None:
    """A Parquet dataset of one file, replacing what the directory held."""
    staged = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    staged.mkdir(parents=True)
    pq.write_table(table, staged / "part-00000.parquet")
    retired = path.with_name(f".{path.name}.old.{uuid.uuid4().hex[:8]}")
    if path.exists():
        path.rename(retired)
    staged.rename(path)
    shutil.rmtree(retired, ignore_errors=True)


def _consumer_lag(url: str) -> list[dict[str, Any]] | None:
    if not relation_exists(url, "consumer_lag"):
        return None
    with psycopg.connect(url) as conn:
        cursor = execute_sync(conn, "pipeline_consumer_lag")
        names = [c.name for c in cursor.description or []]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    rows.sort(key=lambda r: (-r["lag"], -r["dead_letters"], r["consumer_group"], r["topic"]))
    return rows


def _wall_clock(row: dict[str, Any]) -> dict[str, Any]:
    """Times as naive UTC, for people (the page and the summary say UTC)."""
    return {
        k: v.astimezone(UTC).replace(tzinfo=None) if isinstance(v, datetime) else v
        for k, v in row.items()
    }


def _label(row: dict[str, Any]) -> str:
    return charts.row_label(row["producer_group"], row["topic"])


@dataclass(frozen=True)
class _ChartData:
    hours: list[datetime]
    by_state: dict[str, list[int]]
    check_counts: list[int]
    check_messages: list[int]


def _chart_data(figures: Rollup) -> _ChartData:
    per_hour = (
        figures.hourly.group_by("hour").aggregate([(s, "sum") for s in STATES]).sort_by("hour")
    )
    per_check = (
        figures.checks.group_by("check_count")
        .aggregate([("messages", "sum")])
        .sort_by("check_count")
    )
    return _ChartData(
        hours=[h.astimezone(UTC) for h in per_hour.column("hour").to_pylist()],
        by_state={s: per_hour.column(f"{s}_sum").to_pylist() for s in STATES},
        check_counts=per_check.column("check_count").to_pylist(),
        check_messages=per_check.column("messages_sum").to_pylist(),
    )


def _draw_charts(
    out: Path,
    data: _ChartData,
    totals: list[dict[str, Any]],
    lag: list[dict[str, Any]] | None,
) -> list[tuple[str, Path]]:
    out.mkdir(parents=True, exist_ok=True)
    drawn: list[tuple[str, Path]] = []
    if data.hours:
        drawn.append(
            (
                "Messages per hour",
                charts.messages_by_hour(data.hours, data.by_state, out / "messages_by_hour.png"),
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
    if data.check_counts:
        drawn.append(
            (
                "Check-back count distribution",
                charts.check_count_histogram(
                    data.check_counts, data.check_messages, out / "check_counts.png"
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
    spark: SparkSession | None,
    url: str,
    options: ReportOptions,
    *,
    progress: JobProgress | None = None,
) -> ReportResult:
    """The report, read and reduced by Spark in this session, or (None) in this process."""
    timed = StepTimes(progress or QuietProgress())
    out = options.output_dir
    out.mkdir(parents=True, exist_ok=True)
    state_dir = options.state_dir or out / STATE_DIR
    archive = str(options.archive_dir.resolve()) if options.archive_dir else None

    with timed.step("plan", "planning what to read (stored closed hours)"):
        facts = _database_facts(url)
        as_of = options.as_of or facts.now
        manifest = states.load(state_dir)
        read = states.plan(
            state_dir,
            manifest,
            database=facts.identity,
            archive=archive,
            now=facts.now,
            unsettled_hours=lambda since: _unsettled_hours(url, since, facts.now),
            full=options.full,
        )
    if read.full:
        timed.note(f"reading every hour: {read.reason}")
    else:
        timed.note(
            f"reusing {read.kept_hours:,} closed hours from {state_dir}; reading {read.reason}"
        )

    source = report_input(url, options.archive_dir, read)
    if spark is None:
        with timed.step("read", "reading half messages and reducing them (in this process)"):
            computed = arrow.read_partials(source, options.partitions, timed.tasks)
    else:
        from coordinator.pipeline.report import spark as spark_job

        with timed.step("read", "reading half messages and reducing them (Spark)"):
            computed = spark_job.read_partials(spark, source, options.partitions)
    database_rows = int(pc.sum(computed.column("messages")).as_py() or 0)
    archive_rows = int(pc.sum(computed.column("archive_rows")).as_py() or 0)
    database_rows -= archive_rows

    with timed.step("figures", "computing the figures"):
        figures = rollup(pa.concat_tables([read.kept, computed]), as_of)
        totals = sorted(
            figures.totals.to_pylist(),
            key=lambda r: (-r["messages"], r["producer_group"], r["topic"]),
        )
        chart_data = _chart_data(figures)

    with timed.step("write", "writing the Parquet datasets"):
        _write_dataset(figures.hourly, out / "figures_hourly")
        _write_dataset(figures.totals, out / "figures_total")
        _write_dataset(figures.checks, out / "check_counts")
        lag_rows = _consumer_lag(url)
        if lag_rows is not None:
            _write_dataset(pa.Table.from_pylist(lag_rows, schema=LAG_SCHEMA), out / "consumer_lag")
        states.save(
            state_dir,
            manifest,
            read,
            computed,
            database=facts.identity,
            archive=archive,
            now=facts.now,
        )
    lag = [_wall_clock(r) for r in lag_rows] if lag_rows is not None else None

    total = sum(r["messages"] for r in totals)
    with timed.step("charts", "drawing charts"):
        drawn = _draw_charts(out / "charts", chart_data, totals, lag)
    with timed.step("html", "writing the HTML report"):
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
        text = page.render(
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
        html.write_text(text)
    return ReportResult(
        output_dir=out,
        as_of=as_of,
        messages=total,
        groups=len(totals),
        hours=len(chart_data.hours),
        totals=totals,
        consumer_lag=lag,
        html=html,
        charts=[path for _, path in drawn],
        database_rows=database_rows,
        archive_rows=archive_rows,
        archive_days=source.archive_days,
        full=read.full,
        reason=read.reason,
        hours_reused=read.kept_hours,
        state_dir=state_dir,
        timings=timed.seconds,
        engine=SPARK if spark is not None else IN_PROCESS,
    )
