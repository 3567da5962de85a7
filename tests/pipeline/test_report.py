"""The lifecycle report: its figures, by Spark or in-process, equal the same figures in SQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from bench.report_figures import (
    REFERENCE_SQL,
    assert_same_datasets,
    dataset_rows,
    same_figure,
)
from coordinator.pipeline.archive import ArchiveOptions, run_archive
from coordinator.pipeline.archive_layout import MESSAGES
from coordinator.pipeline.figures import STATES
from coordinator.pipeline.report import (
    IN_PROCESS,
    SPARK,
    ReportOptions,
    ReportResult,
    run_report,
)
from tests.pipeline.data import add_message, parquet_column, seed
from tests.pipeline.test_archive import Crash, crash_at

AS_OF = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
SUBSCRIBED_TOPIC = "topic-0"


@pytest.fixture
def history(db: psycopg.Connection) -> None:
    """Generated transactions over 30 hours, a subscription, one dead letter."""
    db.execute(
        "INSERT INTO subscriptions (consumer_group, topic, expression) VALUES ('billing', %s, '*')",
        (SUBSCRIBED_TOPIC,),
    )
    seed(db, 2_500, anchor=AS_OF - timedelta(hours=1), span_hours=30, groups=3, topics=3)
    # a producer group with a single message: percentiles of one value
    add_message(
        db, transaction_id="lonely", producer_group="solo", born_at=AS_OF - timedelta(hours=3)
    )
    db.execute(
        """
        WITH moved AS (
            DELETE FROM deliveries
            WHERE id = (SELECT min(id) FROM deliveries)
            RETURNING message_offset, consumer_group, topic, committed_at
        )
        INSERT INTO dead_letters (message_offset, consumer_group, topic, attempts, committed_at)
        SELECT message_offset, consumer_group, topic, 16, committed_at FROM moved
        """
    )


def _report(
    engine: SparkSession | None, url: str, out: Path, archive: Path | None = None
) -> ReportResult:
    return run_report(
        engine, url, ReportOptions(out, archive_dir=archive, as_of=AS_OF, partitions=3)
    )


def test_hourly_figures_equal_the_sql_aggregate(
    engine: SparkSession | None,
    database_url: str,
    db: psycopg.Connection,
    history: None,
    tmp_path: Path,
) -> None:
    result = _report(engine, database_url, tmp_path)

    spark_rows = dataset_rows(tmp_path / "figures_hourly", ("producer_group", "topic", "hour"))
    sql_rows = {
        (r[0], r[1], r[2]): r
        for r in db.execute(REFERENCE_SQL["pipeline_report_reference"], {"as_of": AS_OF}).fetchall()
    }
    assert spark_rows.keys() == sql_rows.keys()
    assert len(spark_rows) > 60  # 3 groups x 3 topics x ~30 hours, plus the solo group
    for key, expected in sql_rows.items():
        actual = spark_rows[key]
        (
            _,
            _,
            _,
            messages,
            prepared,
            committed,
            rolled_back,
            discarded,
            expired,
            latency,
            checked,
            check_mean,
            check_max,
            discard_rate,
            expiry_rate,
            age_p50,
            age_max,
        ) = expected
        assert actual["messages"] == messages
        assert [actual[s] for s in STATES] == [prepared, committed, rolled_back, discarded, expired]
        assert actual["checked"] == checked and actual["check_count_max"] == check_max
        expected_latency = latency or [None, None, None]
        pairs = [
            (actual["latency_p50_s"], expected_latency[0]),
            (actual["latency_p90_s"], expected_latency[1]),
            (actual["latency_p99_s"], expected_latency[2]),
            (actual["check_count_mean"], check_mean),
            (actual["discard_rate"], discard_rate),
            (actual["expiry_rate"], expiry_rate),
            (actual["pending_age_p50_s"], age_p50),
            (actual["pending_age_max_s"], age_max),
        ]
        assert all(same_figure(a, e) for a, e in pairs), (key, pairs)

    checks = dataset_rows(
        tmp_path / "check_counts", ("producer_group", "topic", "hour", "check_count")
    )
    sql_checks = db.execute(REFERENCE_SQL["pipeline_report_reference_checks"]).fetchall()
    assert {k: r["messages"] for k, r in checks.items()} == {
        (g, t, h, c): n for g, t, h, c, n in sql_checks
    }
    assert (
        result.messages
        == db.execute("SELECT count(*) FROM messages WHERE kind = 'transactional'").fetchone()[0]
    )


def test_totals_consumer_lag_charts_and_page(
    engine: SparkSession | None,
    database_url: str,
    db: psycopg.Connection,
    history: None,
    tmp_path: Path,
) -> None:
    result = _report(engine, database_url, tmp_path)
    totals = dataset_rows(tmp_path / "figures_total", ("producer_group", "topic"))
    expected = db.execute(
        """
        SELECT producer_group, topic, count(*),
               count(*) FILTER (WHERE state = 'committed'),
               percentile_cont(0.99) WITHIN GROUP (
                   ORDER BY extract(epoch FROM resolved_at - born_at)::float8
               ) FILTER (WHERE state IN ('committed', 'rolled_back')),
               max(extract(epoch FROM %s::timestamptz - born_at)::float8)
                   FILTER (WHERE state = 'prepared')
        FROM messages GROUP BY 1, 2
        """,
        (AS_OF,),
    ).fetchall()
    assert totals.keys() == {(g, t) for g, t, *_ in expected}
    for group, topic, messages, committed, p99, oldest in expected:
        row = totals[(group, topic)]
        assert row["messages"] == messages and row["committed"] == committed
        assert same_figure(row["latency_p99_s"], p99) and same_figure(
            row["pending_age_max_s"], oldest
        )
    assert [r["producer_group"] for r in result.totals][-1] == "solo"  # busiest first

    lag_view = db.execute(
        "SELECT consumer_group, topic, lag, in_flight, dead_letters FROM consumer_lag"
    ).fetchall()
    assert lag_view and lag_view[0][4] == 1  # the dead letter planted above
    assert result.consumer_lag is not None
    assert [
        (r["consumer_group"], r["topic"], r["lag"], r["in_flight"], r["dead_letters"])
        for r in result.consumer_lag
    ] == lag_view
    stored = pq.read_table(tmp_path / "consumer_lag").to_pylist()
    assert [(r["consumer_group"], r["lag"]) for r in stored] == [
        (g, n) for g, _, n, _, _ in lag_view
    ]

    # charts and the page
    names = {path.name for path in result.charts}
    assert names == {
        "messages_by_hour.png",
        "latency.png",
        "discard_expiry_rates.png",
        "check_counts.png",
        "pending_ages.png",
        "consumer_lag.png",
    }
    for path in result.charts:
        data = path.read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000
    page = result.html.read_text()
    for path in result.charts:
        assert f'src="charts/{path.name}"' in page
    assert "group-0" in page and "billing" in page and "2,501" in page


def test_archived_and_live_messages_together_give_the_same_report(
    spark: SparkSession,
    engine: SparkSession | None,
    database_url: str,
    db: psycopg.Connection,
    tmp_path: Path,
) -> None:
    now = db.execute("SELECT now()").fetchone()[0]
    seed(db, 1_200, anchor=now, span_hours=24 * 6, groups=2, topics=2)
    as_of = now
    before = run_report(engine, database_url, ReportOptions(tmp_path / "before", as_of=as_of))

    archive = tmp_path / "archive"
    (run,) = run_archive(spark, database_url, ArchiveOptions(archive, timedelta(hours=72)))
    assert run.deleted > 100

    live_only = run_report(engine, database_url, ReportOptions(tmp_path / "live", as_of=as_of))
    both = run_report(
        engine, database_url, ReportOptions(tmp_path / "both", archive_dir=archive, as_of=as_of)
    )
    assert live_only.messages == before.messages - run.deleted
    assert both.messages == before.messages
    keys = ("producer_group", "topic", "hour")
    expected = dataset_rows(tmp_path / "before" / "figures_hourly", keys)
    actual = dataset_rows(tmp_path / "both" / "figures_hourly", keys)
    assert actual.keys() == expected.keys()
    for key, row in expected.items():
        assert all(
            same_figure(actual[key][c], v) if isinstance(v, float) else actual[key][c] == v
            for c, v in row.items()
        ), key


def test_spark_and_the_in_process_engine_write_the_same_report(
    spark: SparkSession, database_url: str, db: psycopg.Connection, history: None, tmp_path: Path
) -> None:
    with_spark = _report(spark, database_url, tmp_path / "spark")
    in_process = _report(None, database_url, tmp_path / "in-process")
    assert (with_spark.engine, in_process.engine) == (SPARK, IN_PROCESS)
    assert in_process.messages == with_spark.messages > 2_500
    assert_same_datasets(tmp_path / "in-process", tmp_path / "spark")


@pytest.mark.parametrize("step", ["published", "deleted-batch"])
def test_a_message_in_postgres_and_in_an_unfinished_archive_run_counts_once(
    spark: SparkSession,
    engine: SparkSession | None,
    database_url: str,
    db: psycopg.Connection,
    tmp_path: Path,
    step: str,
) -> None:
    now = db.execute("SELECT now()").fetchone()[0]
    seed(db, 1_200, anchor=now, span_hours=24 * 6, groups=2, topics=2)
    before = run_report(engine, database_url, ReportOptions(tmp_path / "before", as_of=now))
    archive = tmp_path / "archive"
    # The archive run stops after publishing its files (and after deleting some of
    # their messages): they are in the Parquet files and, all or some, in PostgreSQL.
    with pytest.raises(Crash):
        run_archive(
            spark,
            database_url,
            ArchiveOptions(archive, timedelta(hours=72), batch_size=100),
            checkpoint=crash_at(step),
        )
    archived = len(parquet_column(archive, MESSAGES, "id"))
    live = db.execute("SELECT count(*) FROM messages").fetchone()[0]
    assert archived > 100 and live + archived > before.messages  # counted twice if added up

    both = run_report(
        engine, database_url, ReportOptions(tmp_path / "both", archive_dir=archive, as_of=now)
    )
    assert both.messages == before.messages
    assert both.archive_rows == before.messages - live
    assert_same_datasets(tmp_path / "both", tmp_path / "before")
