"""The audit finds each kind of planted inconsistency, with its ids, and nothing else."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pyarrow.parquet as pq
import pytest
from psycopg import sql
from pyspark.sql import SparkSession

from coordinator.pipeline.archive import ArchiveOptions, run_archive
from coordinator.pipeline.archive_layout import MESSAGES, archive_days, day_files
from coordinator.pipeline.audit import (
    DELIVERED_WITHOUT_LOCAL_COMMIT,
    LOCAL_COMMIT_WITHOUT_DELIVERY,
    PENDING_TOO_LONG,
    AuditOptions,
    ProducerTable,
    run_audit,
)
from tests.pipeline.data import ADDED_MESSAGE_COLUMNS, add_message, drop_added_columns

BARRIER_DDL = """
CREATE TABLE coordinator_barrier (
    transaction_id text PRIMARY KEY,
    outcome text NOT NULL CHECK (outcome IN ('committed', 'rolled_back')),
    created_at timestamptz NOT NULL DEFAULT now()
)
"""


@pytest.fixture
def producer_url(db: psycopg.Connection, database_url: str) -> Iterator[str]:
    """The producer's own database: another database than the coordinator's."""
    name = f"producer_{uuid.uuid4().hex[:10]}"
    db.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield psycopg.conninfo.make_conninfo(database_url, dbname=name)
    db.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def _now(db: psycopg.Connection) -> datetime:
    return db.execute("SELECT now()").fetchone()[0]


def _found(result) -> dict[str, set[str]]:  # type: ignore[no-untyped-def]
    found: dict[str, set[str]] = {}
    for row in result.rows:
        found.setdefault(row["kind"], set()).add(row["transaction_id"])
    return found


def test_each_kind_of_inconsistency_against_the_barrier_table(
    spark: SparkSession,
    database_url: str,
    db: psycopg.Connection,
    producer_url: str,
    tmp_path: Path,
) -> None:
    now = _now(db)
    recent, old = now - timedelta(minutes=20), now - timedelta(days=8)
    plan = {
        # transaction id: (state, born, barrier outcome or None)
        "c-ok": ("committed", recent, "committed"),
        "c-missing": ("committed", recent, None),
        "c-marker": ("committed", recent, "rolled_back"),
        "c-archived-missing": ("committed", old, None),
        "rb-ok": ("rolled_back", recent, "rolled_back"),
        "rb-none": ("rolled_back", recent, None),
        "rb-committed": ("rolled_back", recent, "committed"),
        "disc-committed": ("discarded", recent, "committed"),
        "disc-none": ("discarded", recent, None),
        "exp-committed": ("expired", old, "committed"),
        "p-old": ("prepared", now - timedelta(hours=3), None),
        "p-young-committed": ("prepared", now - timedelta(minutes=5), "committed"),
    }
    offsets = {
        tx: add_message(db, transaction_id=tx, state=state, born_at=born)
        for tx, (state, born, _) in plan.items()
    }
    add_message(db, kind="normal", producer_group=None, message_id="plain", born_at=recent)
    add_message(db, transaction_id="other-group", producer_group="elsewhere", born_at=recent)
    with psycopg.connect(producer_url, autocommit=True) as producer:
        producer.execute(BARRIER_DDL)
        for tx, (_, _, outcome) in plan.items():
            if outcome:
                producer.execute("INSERT INTO coordinator_barrier VALUES (%s, %s)", (tx, outcome))
        producer.execute("INSERT INTO coordinator_barrier VALUES ('no-message', 'committed')")

    options = AuditOptions(
        producer=ProducerTable(producer_url),
        producer_groups=("shop",),
        pending_longer_than=timedelta(hours=1),
        output_dir=tmp_path / "audit",
        partitions=3,
    )
    result = run_audit(spark, database_url, options)
    assert _found(result) == {
        DELIVERED_WITHOUT_LOCAL_COMMIT: {"c-missing", "c-marker", "c-archived-missing"},
        LOCAL_COMMIT_WITHOUT_DELIVERY: {"rb-committed", "disc-committed", "exp-committed"},
        PENDING_TOO_LONG: {"p-old"},
    }
    assert result.counts == {
        DELIVERED_WITHOUT_LOCAL_COMMIT: 3,
        LOCAL_COMMIT_WITHOUT_DELIVERY: 3,
        PENDING_TOO_LONG: 1,
    }
    by_tx = {r["transaction_id"]: r for r in result.rows}
    assert by_tx["c-marker"]["local_outcome"] == "not committed"
    assert by_tx["c-missing"]["local_outcome"] == "no row"
    assert by_tx["exp-committed"]["message_offset"] == offsets["exp-committed"]
    stored = pq.read_table(tmp_path / "audit" / "inconsistencies").to_pylist()
    assert sorted(r["transaction_id"] for r in stored) == sorted(by_tx)

    # without the group filter, the other group's unbacked commit shows up too
    everyone = run_audit(spark, database_url, AuditOptions(producer=ProducerTable(producer_url)))
    assert _found(everyone)[DELIVERED_WITHOUT_LOCAL_COMMIT] == {
        "c-missing",
        "c-marker",
        "c-archived-missing",
        "other-group",
    }

    # archived messages are audited when the archive is given
    archive = tmp_path / "archive"
    run_archive(spark, database_url, ArchiveOptions(archive, timedelta(hours=72), partitions=2))
    live_only = run_audit(spark, database_url, options)
    assert "c-archived-missing" not in _found(live_only)[DELIVERED_WITHOUT_LOCAL_COMMIT]
    with_archive = run_audit(
        spark, database_url, AuditOptions(**{**options.__dict__, "archive_dir": archive})
    )
    assert _found(with_archive) == _found(result)


def test_any_table_key_and_condition_matched_on_a_property(
    spark: SparkSession, database_url: str, db: psycopg.Connection, producer_url: str
) -> None:
    now = _now(db)
    orders = {
        # order id: (message state, statuses of the order's rows)
        1: ("committed", ["paid"]),
        2: ("committed", ["cancelled"]),
        3: ("rolled_back", ["paid"]),
        4: ("rolled_back", []),
        5: ("committed", ["cancelled", "shipped"]),
        6: ("expired", ["cancelled"]),
    }
    for order, (state, _) in orders.items():
        add_message(
            db,
            transaction_id=f"tx-{order}",
            state=state,
            born_at=now - timedelta(minutes=30),
            properties=f'{{"order_id": "{order}"}}',
        )
    with psycopg.connect(producer_url, autocommit=True) as producer:
        producer.execute("CREATE SCHEMA shop")
        producer.execute("CREATE TABLE shop.orders (order_id bigint, status text)")
        for order, (_, statuses) in orders.items():
            for status in statuses:
                producer.execute("INSERT INTO shop.orders VALUES (%s, %s)", (order, status))

    table = ProducerTable(
        producer_url,
        table="shop.orders",
        key="order_id",
        committed_when="status IN ('paid', 'shipped')",
    )
    result = run_audit(
        spark, database_url, AuditOptions(producer=table, match_on="property:order_id")
    )
    assert _found(result) == {
        DELIVERED_WITHOUT_LOCAL_COMMIT: {"tx-2"},
        LOCAL_COMMIT_WITHOUT_DELIVERY: {"tx-3"},
    }
    assert result.counts[PENDING_TOO_LONG] == 0


def test_a_consistent_history_has_nothing_to_report(
    spark: SparkSession, database_url: str, db: psycopg.Connection, producer_url: str
) -> None:
    now = _now(db)
    with psycopg.connect(producer_url, autocommit=True) as producer:
        producer.execute(BARRIER_DDL)
        for n in range(20):
            state = ("committed", "rolled_back", "discarded", "prepared")[n % 4]
            add_message(db, transaction_id=f"t{n}", state=state, born_at=now - timedelta(minutes=n))
            if state == "committed":
                producer.execute(
                    "INSERT INTO coordinator_barrier VALUES (%s, 'committed')", (f"t{n}",)
                )
            elif state == "rolled_back" and n % 8 == 1:
                producer.execute(
                    "INSERT INTO coordinator_barrier VALUES (%s, 'rolled_back')", (f"t{n}",)
                )
    result = run_audit(spark, database_url, AuditOptions(producer=ProducerTable(producer_url)))
    assert result.total == 0 and result.messages == 20 and result.producer_rows > 0


def test_an_archive_partly_written_before_the_added_columns_is_audited(
    spark: SparkSession,
    database_url: str,
    db: psycopg.Connection,
    producer_url: str,
    tmp_path: Path,
) -> None:
    old = _now(db) - timedelta(days=8)
    for tx in ("missing", "ok"):
        add_message(db, transaction_id=tx, born_at=old)
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    add_message(
        db,
        transaction_id="traced-missing",
        born_at=old - timedelta(days=1),
        deliver_at=old,
        trace_context=traceparent,
    )
    with psycopg.connect(producer_url, autocommit=True) as producer:
        producer.execute(BARRIER_DDL)
        producer.execute("INSERT INTO coordinator_barrier VALUES ('ok', 'committed')")
    archive = tmp_path / "archive"
    run_archive(spark, database_url, ArchiveOptions(archive, timedelta(hours=72), partitions=2))
    # The newer day's files as the archive wrote them before the columns existed.
    traced_day, plain_day = archive_days(archive, MESSAGES)
    assert drop_added_columns(day_files(archive, MESSAGES, [plain_day])) > 0
    (traced_file,) = day_files(archive, MESSAGES, [traced_day])
    assert set(ADDED_MESSAGE_COLUMNS) <= set(pq.read_schema(traced_file).names)

    options = AuditOptions(producer=ProducerTable(producer_url), archive_dir=archive)
    result = run_audit(spark, database_url, options)
    assert result.messages == 3
    assert _found(result) == {DELIVERED_WITHOUT_LOCAL_COMMIT: {"missing", "traced-missing"}}
