"""Archive to Parquet: verified copies, batched deletes, and crash-and-rerun at every step."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from coordinator.db import schema
from coordinator.db.queries import execute_sync
from coordinator.pipeline import manifest
from coordinator.pipeline.archive import (
    CHECKPOINTS,
    ArchiveBusy,
    ArchiveNotVerified,
    ArchiveOptions,
    run_archive,
)
from coordinator.pipeline.manifest import RunStatus
from coordinator.pipeline.report import ReportOptions, run_report
from coordinator.pipeline.tables import (
    ARCHIVED_HISTORY_SCHEMA,
    ARCHIVED_MESSAGES_SCHEMA,
    HISTORY,
    MESSAGES,
    read_parquet_dataset,
)
from tests.pipeline.data import (
    ADDED_MESSAGE_COLUMNS,
    add_message,
    drop_added_columns,
    parquet_column,
    seed,
)

OLD = timedelta(days=8)
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class Crash(Exception):
    pass


def crash_at(name: str, occurrence: int = 1):  # type: ignore[no-untyped-def]
    """A checkpoint hook that raises at the given occurrence of one checkpoint."""
    seen = Counter[str]()

    def hook(reached: str) -> None:
        seen[reached] += 1
        if reached == name and seen[reached] == occurrence:
            raise Crash(name)

    return hook


@pytest.fixture
def planted(db: psycopg.Connection) -> dict[str, set[int]]:
    """Old and recent messages; which must be archived and which must stay."""
    now = db.execute("SELECT now()").fetchone()[0]
    db.execute(
        "INSERT INTO subscriptions (consumer_group, topic, expression) "
        "VALUES ('billing', 'invoices', '*')"
    )
    seed(db, 120, anchor=now - OLD, span_hours=48, topics=3)  # old: resolved ones go
    seed(db, 40, anchor=now, span_hours=2, seed=2)  # recent: all stay
    old = now - OLD
    awkward = {
        # a normal message: no transaction id, no producer group
        add_message(
            db,
            kind="normal",
            producer_group=None,
            message_id="normal-1",
            born_at=old,
            tags="ü|tag",
            keys=["a,b", "c"],
            body=b"\x00\xff\xfe",
        ),
        add_message(
            db,
            transaction_id="immune",
            born_at=old,
            state="rolled_back",
            check_immunity=timedelta(seconds=30.000001),
            message_group="g|1",
            properties='{"note": "multi\\nline ✓", "pipe": "a|b"}',
            detail="created | with \\N and\nnewline",
            topic="odd%topic",
        ),
    }
    # committed on a subscribed topic: a delivery row is waiting, so it stays
    undelivered = add_message(db, transaction_id="undelivered", topic="invoices", born_at=old)
    dead = add_message(db, transaction_id="dead", topic="payments", born_at=old)
    db.execute(
        "INSERT INTO dead_letters (message_offset, consumer_group, topic, attempts, committed_at) "
        "VALUES (%s, 'billing', 'payments', 16, now())",
        (dead,),
    )
    rows = db.execute(
        """
        SELECT id, state <> 'prepared' AND resolved_at < now() - interval '72 hours'
        FROM messages
        """
    ).fetchall()
    eligible = {i for i, ok in rows if ok} - {undelivered, dead}
    assert awkward <= eligible and len(eligible) > 80
    return {"eligible": eligible, "staying": {i for i, _ in rows} - eligible, "awkward": awkward}


def _options(archive: Path, batch_size: int = 25) -> ArchiveOptions:
    return ArchiveOptions(archive, timedelta(hours=72), batch_size=batch_size, partitions=3)


def _live_ids(db: psycopg.Connection) -> set[int]:
    return {i for (i,) in db.execute("SELECT id FROM messages").fetchall()}


def _history_ids(db: psycopg.Connection, offsets: set[int]) -> set[int]:
    rows = db.execute(
        "SELECT id FROM message_history WHERE message_offset = ANY(%s)", (list(offsets),)
    )
    return {i for (i,) in rows.fetchall()}


def _assert_exactly_once(db: psycopg.Connection, archive: Path, planted, history) -> None:  # type: ignore[no-untyped-def]
    archived = parquet_column(archive, MESSAGES, "id")
    archived_history = parquet_column(archive, HISTORY, "id")
    assert len(archived) == len(set(archived)), "a message is archived twice"
    assert len(archived_history) == len(set(archived_history)), "a history row is archived twice"
    assert set(archived) == planted["eligible"]
    assert set(archived_history) == history
    assert _live_ids(db) == planted["staying"]  # deleted exactly the archived ones
    assert not list((archive / "_staging").glob("*/*"))
    assert manifest.unfinished_runs(archive) == []


def test_archive_copies_verifies_and_deletes(
    spark: SparkSession,
    database_url: str,
    db: psycopg.Connection,
    planted,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    history = _history_ids(db, planted["eligible"])
    originals = {
        r[0]: r
        for r in db.execute(
            "SELECT id, message_id, transaction_id, tags, keys, body, properties::text, "
            "extract(epoch FROM check_immunity)::float8, message_group, topic "
            "FROM messages WHERE id = ANY(%s)",
            (list(planted["awkward"]),),
        ).fetchall()
    }
    (run,) = run_archive(spark, database_url, _options(tmp_path))

    assert run.status is RunStatus.DONE and run.kept == []
    assert run.messages == run.deleted == len(planted["eligible"])
    assert run.history == len(history)
    _assert_exactly_once(db, tmp_path, planted, history)
    # partitioned by birth date and topic, with the run in each file's name
    files = sorted((tmp_path / MESSAGES).glob("born_date=*/topic=*/*.parquet"))
    assert files and all(f.name.startswith(f"run-{run.run_id}-") for f in files)
    assert {p.topic for p in run.partitions} >= {"topic-0", "odd%topic"}
    # the awkward rows arrive byte for byte
    table = pq.read_table(tmp_path / MESSAGES).to_pylist()
    for row in (r for r in table if r["id"] in planted["awkward"]):
        _offset, message_id, transaction_id, tags, keys, body, props, immunity, group, topic = (
            originals[row["id"]]
        )
        assert (row["message_id"], row["transaction_id"], row["tags"]) == (
            message_id,
            transaction_id,
            tags,
        )
        assert row["keys"] == keys and row["body"] == body and row["properties"] == props
        assert row["check_immunity_seconds"] == immunity and row["message_group"] == group
        assert str(row["topic"]) == topic
    # a second run finds nothing more to do
    (again,) = run_archive(spark, database_url, _options(tmp_path))
    assert again.messages == 0 and again.deleted == 0
    _assert_exactly_once(db, tmp_path, planted, history)


@pytest.mark.parametrize(
    ("checkpoint", "occurrence"),
    [
        ("planned", 1),
        ("copied-messages", 1),
        ("copied", 1),
        ("verified", 1),
        ("published-file", 3),  # mid-publish: some files moved, others still staged
        ("published", 1),
        ("deleted-batch", 2),  # mid-delete: some batches committed
        ("deleted", 1),
        ("finished", 1),
    ],
)
def test_a_crash_at_any_step_then_a_rerun_loses_and_duplicates_nothing(
    spark: SparkSession,
    database_url: str,
    db: psycopg.Connection,
    planted,  # type: ignore[no-untyped-def]
    tmp_path: Path,
    checkpoint: str,
    occurrence: int,
) -> None:
    assert checkpoint in CHECKPOINTS
    history = _history_ids(db, planted["eligible"])
    with pytest.raises(Crash):
        run_archive(
            spark, database_url, _options(tmp_path), checkpoint=crash_at(checkpoint, occurrence)
        )

    # at the crash: every archivable message is still somewhere
    archived = parquet_column(tmp_path, MESSAGES, "id")
    assert len(archived) == len(set(archived))
    assert planted["eligible"] <= _live_ids(db) | set(archived)
    (unfinished,) = manifest.unfinished_runs(tmp_path)

    runs = run_archive(spark, database_url, _options(tmp_path))
    assert runs[0].run_id == unfinished.run_id  # resumed first
    assert sum(r.deleted for r in runs) <= len(planted["eligible"])
    _assert_exactly_once(db, tmp_path, planted, history)


def test_a_message_that_gets_a_delivery_while_archived_stays_live_only(
    spark: SparkSession,
    database_url: str,
    db: psycopg.Connection,
    planted,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    target = min(planted["eligible"] - planted["awkward"])
    topic = db.execute("SELECT topic FROM messages WHERE id = %s", (target,)).fetchone()[0]

    def redeliver(reached: str) -> None:
        # Between publish and delete, someone gives the message a delivery row.
        if reached == "published":
            db.execute(
                "INSERT INTO subscriptions (consumer_group, topic, expression) "
                "VALUES ('late', %s, '*') ON CONFLICT DO NOTHING",
                (topic,),
            )
            db.execute(
                "INSERT INTO deliveries (message_offset, consumer_group, topic) "
                "VALUES (%s, 'late', %s)",
                (target, topic),
            )

    (run,) = run_archive(spark, database_url, _options(tmp_path), checkpoint=redeliver)
    assert run.kept == [target]
    assert run.deleted == len(planted["eligible"]) - 1
    archived = parquet_column(tmp_path, MESSAGES, "id")
    assert target not in archived and target in _live_ids(db)
    assert target not in parquet_column(tmp_path, HISTORY, "message_offset")
    assert set(archived) == planted["eligible"] - {target}
    # the rewritten files still read as one dataset
    assert read_parquet_dataset(spark, tmp_path, MESSAGES).count() == len(archived)
    assert (
        read_parquet_dataset(spark, tmp_path, HISTORY).where(f"message_offset = {target}").count()
        == 0
    )


def test_a_copy_that_does_not_match_is_not_published_and_is_redone(
    spark: SparkSession,
    database_url: str,
    db: psycopg.Connection,
    planted,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    victim = min(planted["eligible"])

    def tamper(reached: str) -> None:
        if reached == "copied":  # the database changes between copy and verify
            db.execute("UPDATE messages SET tags = 'changed' WHERE id = %s", (victim,))

    with pytest.raises(ArchiveNotVerified, match="does not match PostgreSQL"):
        run_archive(spark, database_url, _options(tmp_path), checkpoint=tamper)
    assert parquet_column(tmp_path, MESSAGES, "id") == []  # nothing published
    assert planted["eligible"] <= _live_ids(db)  # nothing deleted
    (unfinished,) = manifest.unfinished_runs(tmp_path)
    assert unfinished.status is RunStatus.PLANNED

    history = _history_ids(db, planted["eligible"])
    run_archive(spark, database_url, _options(tmp_path))
    _assert_exactly_once(db, tmp_path, planted, history)
    tags = dict(
        zip(
            parquet_column(tmp_path, MESSAGES, "id"),
            parquet_column(tmp_path, MESSAGES, "tags"),
            strict=True,
        )
    )
    assert tags[victim] == "changed"


def test_one_archive_run_at_a_time(spark: SparkSession, database_url: str, tmp_path: Path) -> None:
    with psycopg.connect(database_url, autocommit=True) as other:
        other.execute(
            "SELECT pg_advisory_lock(hashtextextended('coordinator pipeline archive', 7))"
        )
        with pytest.raises(ArchiveBusy):
            run_archive(spark, database_url, _options(tmp_path))


def _added_values(db: psycopg.Connection) -> dict[int, tuple[object, object]]:
    rows = db.execute("SELECT id, deliver_at, trace_context FROM messages").fetchall()
    return {i: (deliver_at, trace) for i, deliver_at, trace in rows}


def _archived_added_values(archive: Path) -> dict[int, tuple[object, object]]:
    rows = pq.read_table(archive / MESSAGES, columns=["id", *ADDED_MESSAGE_COLUMNS]).to_pylist()
    return {r["id"]: (r["deliver_at"], r["trace_context"]) for r in rows}


def test_a_delayed_traced_message_keeps_its_delivery_time_and_trace_context(
    spark: SparkSession, database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    old = db.execute("SELECT now()").fetchone()[0] - OLD
    delayed = add_message(
        db,
        transaction_id="delayed",
        born_at=old,
        deliver_at=old + timedelta(minutes=10, microseconds=123457),
        trace_context=TRACEPARENT,
    )
    add_message(
        db,
        kind="normal",
        producer_group=None,
        message_id="traced",
        born_at=old,
        trace_context=TRACEPARENT[:-2] + "00",
    )
    add_message(
        db,
        transaction_id="delay-only",
        state="rolled_back",
        born_at=old,
        deliver_at=old + timedelta(hours=1),
    )
    add_message(db, transaction_id="plain", born_at=old)
    expected = _added_values(db)

    # PostgreSQL's checksum covers both columns: it moves when either changes
    # (a microsecond, a value become NULL). The Parquet side's covers them too,
    # or the run below would not verify.
    def checksums() -> list[tuple[object, ...]]:
        bounds = {"cutoff": datetime.now(UTC), "max_id": 2**62}
        return execute_sync(db, "pipeline_archive_message_checksums", bounds).fetchall()

    unchanged = checksums()
    for change, undo in (
        ("deliver_at = deliver_at + interval '1 microsecond'", "deliver_at = %(deliver_at)s"),
        ("trace_context = NULL", "trace_context = %(trace_context)s"),
    ):
        db.execute(f"UPDATE messages SET {change} WHERE id = %(id)s", {"id": delayed})
        assert checksums() != unchanged, change
        db.execute(
            f"UPDATE messages SET {undo} WHERE id = %(id)s",
            {"id": delayed, "deliver_at": expected[delayed][0], "trace_context": TRACEPARENT},
        )
        assert checksums() == unchanged

    # The two checksums agree and the rows leave PostgreSQL.
    (run,) = run_archive(spark, database_url, _options(tmp_path))
    assert run.deleted == len(expected) and _live_ids(db) == set()
    assert _archived_added_values(tmp_path) == expected
    # and Spark's reader (report, audit) reads the same values
    spark_rows = (
        read_parquet_dataset(spark, tmp_path, MESSAGES).select("id", "deliver_at").collect()
    )
    assert {r["id"]: r["deliver_at"] for r in spark_rows}[delayed].timestamp() == (
        expected[delayed][0].timestamp()
    )


def test_an_archive_written_before_the_added_columns_still_verifies_and_reads(
    spark: SparkSession, database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    old = db.execute("SELECT now()").fetchone()[0] - OLD
    before = {add_message(db, transaction_id=f"before-{n}", born_at=old) for n in range(3)}
    # A run copies them and stops before it records its verification; its copy
    # is then made what a version without the columns wrote.
    with pytest.raises(Crash):
        run_archive(spark, database_url, _options(tmp_path), checkpoint=crash_at("verified"))
    (unfinished,) = manifest.unfinished_runs(tmp_path)
    assert unfinished.status is RunStatus.COPIED  # the rerun verifies the copy again
    staged = sorted((tmp_path / "_staging").rglob(f"{MESSAGES}/*=*/*=*/*.parquet"))
    assert drop_added_columns(staged) > 0
    # A message with both values, a day older: a partition of its own.
    after = add_message(
        db,
        transaction_id="after",
        born_at=old - timedelta(days=1),
        deliver_at=old,
        trace_context=TRACEPARENT,
    )

    # The old copy verifies (rows without the values fingerprint as before) and
    # the new run archives the new message with them.
    resumed, fresh = run_archive(spark, database_url, _options(tmp_path))
    assert resumed.deleted == len(before) and fresh.deleted == 1 and _live_ids(db) == set()
    old_files = [f for f in (tmp_path / MESSAGES).rglob("*.parquet") if resumed.run_id in f.name]
    assert old_files and all(
        not set(ADDED_MESSAGE_COLUMNS) & set(pq.read_schema(f).names) for f in old_files
    )

    # Both layouts read as one dataset: the old files' rows have nulls.
    rows = read_parquet_dataset(spark, tmp_path, MESSAGES).collect()
    values = {r["id"]: (r["deliver_at"] is not None, r["trace_context"]) for r in rows}
    assert values == {**dict.fromkeys(before, (False, None)), after: (True, TRACEPARENT)}
    # and the report's in-process reader, both layouts in one Arrow dataset
    report = run_report(
        None, database_url, ReportOptions(tmp_path / "report", archive_dir=tmp_path, partitions=1)
    )
    assert report.archive_rows == len(before) + 1 and report.messages == len(before) + 1


def test_the_archive_takes_every_column_of_messages_and_history(db: psycopg.Connection) -> None:
    """A column added to either table must be archived too, or archiving loses it."""
    renamed = {"check_immunity": "check_immunity_seconds"}
    columns = {renamed.get(c.name, c.name) for c in schema.messages.columns} | {"born_date"}
    assert set(ARCHIVED_MESSAGES_SCHEMA.fieldNames()) == columns
    history = {c.name for c in schema.message_history.columns} | {"born_date", "topic"}
    assert set(ARCHIVED_HISTORY_SCHEMA.fieldNames()) == history
    bounds = {"cutoff": datetime.now(UTC), "max_id": 0}
    for name, expected in (
        ("pipeline_archive_messages", ARCHIVED_MESSAGES_SCHEMA),
        ("pipeline_archive_history", ARCHIVED_HISTORY_SCHEMA),
    ):
        selected = execute_sync(db, name, bounds).description or []
        assert [c.name for c in selected] == expected.fieldNames(), name
