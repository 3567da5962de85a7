"""The incremental report: closed hours are stored, a rerun reads only what can have changed.

Each test counts the rows a run actually read (PostgreSQL rows, archive rows
and the archive's day partitions it opened), holds them to what SQL and the
Parquet files say the hours to read hold, and checks that the figures equal
a full recompute (and SQL's, for the live tables).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from bench.report_figures import assert_equal_figures, assert_same_datasets, sql_figures
from coordinator.cli import app
from coordinator.pipeline.archive import ArchiveOptions, run_archive
from coordinator.pipeline.report import ReportOptions, ReportResult, run_report
from coordinator.pipeline.report import state as report_state
from tests.pipeline.data import seed


def _now(db: psycopg.Connection) -> datetime:
    return db.execute("SELECT now()").fetchone()[0]  # type: ignore[index]


def _hour(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _settle_before(db: psycopg.Connection, moment: datetime, keep: list[int]) -> None:
    """Commit the prepared messages born before `moment` (but `keep`), as their producers
    would have: an hour of the generated history is then closed once it is old enough."""
    db.execute(
        "UPDATE messages SET state = 'committed', resolved_at = born_at + interval '2 seconds', "
        "resolution_source = 'client', next_check_at = NULL "
        "WHERE state = 'prepared' AND born_at < %s AND id <> ALL(%s::bigint[])",
        (moment, keep),
    )


def _prepared_born_before(db: psycopg.Connection, moment: datetime) -> tuple[int, datetime]:
    row = db.execute(
        "SELECT id, born_at FROM messages WHERE state = 'prepared' AND born_at < %s "
        "ORDER BY born_at DESC LIMIT 1",
        (moment,),
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def _resolve_now(db: psycopg.Connection, offset: int) -> None:
    """What an operator's (or a late producer's) resolution writes: resolved_at = now()."""
    db.execute(
        "UPDATE messages SET state = 'committed', resolved_at = now(), "
        "resolution_source = 'operator', next_check_at = NULL WHERE id = %s",
        (offset,),
    )


def _live_rows_in(db: psycopg.Connection, recent: datetime, hours: set[datetime]) -> int:
    return db.execute(  # type: ignore[index]
        "SELECT count(*) FROM messages WHERE kind = 'transactional' AND (born_at >= %s "
        "OR date_trunc('hour', born_at AT TIME ZONE 'UTC') = ANY(%s))",
        (recent, [h.replace(tzinfo=None) for h in hours]),
    ).fetchone()[0]


def _recent_from(result: ReportResult) -> datetime:
    manifest = report_state.load(result.state_dir)  # type: ignore[arg-type]
    assert manifest is not None
    return datetime.fromisoformat(manifest.recent_from)


def _hours_with_prepared(db: psycopg.Connection) -> set[datetime]:
    rows = db.execute(
        "SELECT DISTINCT date_trunc('hour', born_at AT TIME ZONE 'UTC') FROM messages "
        "WHERE state = 'prepared'"
    ).fetchall()
    return {hour.replace(tzinfo=UTC) for (hour,) in rows}


def _hours_before(db: psycopg.Connection, moment: datetime) -> set[datetime]:
    rows = db.execute(
        "SELECT DISTINCT date_trunc('hour', born_at AT TIME ZONE 'UTC') FROM messages "
        "WHERE born_at < %s",
        (moment,),
    ).fetchall()
    return {hour.replace(tzinfo=UTC) for (hour,) in rows}


def test_a_rerun_reads_only_the_hours_that_can_change(
    engine: SparkSession | None, database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    start = _now(db)
    seed(db, 3_000, anchor=start, span_hours=30, groups=2, topics=2)
    # two old hours stay open (a message still prepared), every other old one settles
    still_open, open_born = _prepared_born_before(db, start - timedelta(hours=9))
    resolved_late, late_born = _prepared_born_before(db, start - timedelta(hours=20))
    _settle_before(db, start - timedelta(hours=3), keep=[still_open, resolved_late])
    total = db.execute("SELECT count(*) FROM messages").fetchone()[0]
    out = tmp_path / "report"

    first = run_report(engine, database_url, ReportOptions(out, partitions=3))
    assert first.full and first.reason == "no stored figures yet"
    assert first.database_rows == first.messages == total
    recent = _recent_from(first)
    assert _hour(start - report_state.CLOSE_MARGIN) <= recent
    open_at_first = {h for h in _hours_with_prepared(db) if h < recent}
    assert {_hour(open_born), _hour(late_born)} <= open_at_first
    closed_at_first = _hours_before(db, recent) - open_at_first

    # Meanwhile: new messages, a late resolution in an open hour, and an operator's
    # commit of a discarded message in a closed hour.
    seed(db, 40, anchor=_now(db), span_hours=0.1, groups=2, topics=2, seed=2)
    _resolve_now(db, resolved_late)
    discarded, discarded_born = db.execute(
        "SELECT id, born_at FROM messages WHERE state = 'discarded' "
        "AND date_trunc('hour', born_at AT TIME ZONE 'UTC') = ANY(%s) ORDER BY born_at LIMIT 1",
        ([h.replace(tzinfo=None) for h in closed_at_first],),
    ).fetchone()
    _resolve_now(db, discarded)
    as_of = _now(db)

    second = run_report(engine, database_url, ReportOptions(out, as_of=as_of, partitions=3))

    assert not second.full
    reread = open_at_first | {_hour(discarded_born)}
    expected_rows = _live_rows_in(db, recent, reread)
    assert second.database_rows == expected_rows
    assert second.messages == total + 40
    assert expected_rows < second.messages / 3  # most hours were not read again
    assert second.hours_reused == len(closed_at_first) - 1  # all but the discarded one's hour
    assert_equal_figures(out, sql_figures(database_url, as_of))

    full = run_report(
        engine, database_url, ReportOptions(tmp_path / "full", as_of=as_of, partitions=3, full=True)
    )
    assert full.full and full.database_rows == second.messages
    assert_same_datasets(out, tmp_path / "full")

    # Nothing changed since: the recent hours and those still open are read, and the
    # hours changed less than CLOSE_MARGIN before the second run's clock (a transaction
    # in flight then may have committed after its read) once more; no other.
    recent = _recent_from(second)
    third = run_report(engine, database_url, ReportOptions(out, as_of=as_of, partitions=3))
    open_now = {h for h in _hours_with_prepared(db) if h < recent}
    assert _hour(open_born) in open_now and _hour(late_born) not in open_now
    changed = {_hour(late_born), _hour(discarded_born)}
    assert third.database_rows == _live_rows_in(db, recent, open_now | changed)
    assert_same_datasets(out, tmp_path / "full")


def _hours_from(result: ReportResult) -> list[datetime]:
    table = pq.read_table(result.output_dir / "figures_hourly", columns=["hour"])
    return sorted({h.astimezone(UTC) for h in table.column("hour").to_pylist()})


def _archived_rows_in(archive: Path, hours: set[datetime]) -> int:
    table = pq.read_table(archive / "messages", columns=["born_at", "kind"])
    born = [_hour(b) for b, k in zip(*table.to_pydict().values(), strict=True) if k]
    return sum(1 for hour in born if hour in hours)


def test_archived_hours_keep_their_figures_and_only_the_days_read_are_opened(
    spark: SparkSession,
    engine: SparkSession | None,
    database_url: str,
    db: psycopg.Connection,
    tmp_path: Path,
) -> None:
    start = _now(db)
    seed(db, 2_400, anchor=start, span_hours=24 * 6, groups=2, topics=2)
    old_open, old_born = _prepared_born_before(db, start - timedelta(hours=100))
    _settle_before(db, start - timedelta(hours=3), keep=[old_open])
    archive = tmp_path / "archive"
    out = tmp_path / "report"
    options = ReportOptions(out, archive_dir=archive, partitions=3)

    first = run_report(engine, database_url, options)
    assert first.full and first.archive_rows == 0
    recent = _recent_from(first)
    open_at_first = {h for h in _hours_with_prepared(db) if h < recent}

    (run,) = run_archive(spark, database_url, ArchiveOptions(archive, timedelta(hours=72)))
    assert run.deleted > 500
    archived_days = sorted(p.name.split("=")[1] for p in (archive / "messages").glob("born_date=*"))
    assert len(archived_days) >= 3
    _resolve_now(db, old_open)
    seed(db, 30, anchor=_now(db), span_hours=0.1, groups=2, topics=2, seed=2)
    as_of = _now(db)

    second = run_report(engine, database_url, ReportOptions(out, archive, as_of, partitions=3))

    old_hour = _hour(old_born)
    assert second.archive_days == [old_hour.date().isoformat()]  # one day of the archive
    assert second.archive_rows == _archived_rows_in(archive, {old_hour}) > 0
    assert second.database_rows == _live_rows_in(db, recent, open_at_first)
    assert second.messages == first.messages + 30
    full = run_report(
        engine,
        database_url,
        ReportOptions(tmp_path / "full", archive, as_of, partitions=3, full=True),
    )
    assert full.archive_rows == run.messages and full.archive_days == archived_days
    assert_same_datasets(out, tmp_path / "full")

    # A state made with another archive (or none) is not used.
    other = run_report(engine, database_url, ReportOptions(out, as_of=as_of, partitions=3))
    assert (
        other.full
        and other.reason == f"the stored figures were made with --archive-dir {archive.resolve()}"
    )


def test_the_report_command_says_what_it_read_and_reuses_its_state(
    spark: SparkSession, database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    start = _now(db)
    seed(db, 500, anchor=start, span_hours=12, groups=2, topics=2)
    _settle_before(db, start - timedelta(hours=2), keep=[])
    state = tmp_path / "state"

    def report(*flags: str) -> str:
        result = CliRunner().invoke(
            app,
            [
                *("--database-url", database_url, "pipeline", "report"),
                *("-o", str(tmp_path / "out"), "--state-dir", str(state), "--partitions", "2"),
                *flags,
            ],
        )
        assert result.exit_code == 0, result.output
        return result.output

    assert "read 500 rows from PostgreSQL, in this process (no Spark).\n" in report()
    assert (state / "state.json").is_file() and not (tmp_path / "out" / "_state").exists()
    again = report()
    assert "closed hours reused from the state" in again and "reading every hour" not in again
    assert "read 500 rows" not in again
    assert "read 500 rows from PostgreSQL, in this process (no Spark).\n" in report("--full")
    stored = pq.read_table(state / "closed")
    assert pc.sum(stored.column("prepared")).as_py() == 0  # closed hours have nothing pending


@pytest.mark.parametrize("hours", [0, 1, 3])
def test_hours_become_the_fewest_ranges(hours: int) -> None:
    base = datetime(2026, 11, 20, 10, tzinfo=UTC)
    picked = [base + timedelta(hours=h) for h in range(hours)] + [base + timedelta(hours=9)]
    micros = [report_state.epoch_micros(h) for h in picked]
    ranges = report_state.merged_ranges(micros)
    expected = [(base + timedelta(hours=9), base + timedelta(hours=10))]
    if hours:
        expected.insert(0, (base, base + timedelta(hours=hours)))
    assert ranges == expected
