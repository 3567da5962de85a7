"""read_database_url: `pipeline report` (in-process and on Spark) and `pipeline audit` read a
streaming standby; `pipeline archive`, which deletes, works on the primary.

A real primary and a real hot standby of it (tests/streaming_standby.py), the
standby's replay paused: a message the primary committed meanwhile is seen
only where the primary is read.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from coordinator.cli import app
from tests.pipeline.data import add_message
from tests.streaming_standby import StreamingStandby, streaming_standby

pytestmark = pytest.mark.slow

runner = CliRunner()
BARRIER = (
    "CREATE TABLE coordinator_barrier (transaction_id text PRIMARY KEY, outcome text NOT NULL)"
)


@pytest.fixture(scope="module")
def pair() -> Iterator[StreamingStandby]:
    with streaming_standby() as started:
        yield started


@pytest.fixture
def lagging(pair: StreamingStandby) -> Iterator[tuple[str, str]]:
    """Four old messages, each backed by the producer's barrier row, on both servers; then
    a fifth without one on the primary only. The primary's URL and the standby's."""
    name = f"pipeline_{uuid.uuid4().hex[:12]}"
    primary = pair.migrated_database(name)
    with psycopg.connect(primary, autocommit=True) as db:
        now = db.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        db.execute(BARRIER)
        for n in range(4):
            add_message(db, transaction_id=f"old-{n}", born_at=now - timedelta(days=5))
            db.execute("INSERT INTO coordinator_barrier VALUES (%s, 'committed')", (f"old-{n}",))
        pair.wait_for_replay()
        pair.pause_replay()
        try:
            add_message(db, transaction_id="late", born_at=now - timedelta(hours=2))
            pair.wait_for_receipt()
            yield primary, pair.standby_url(name)
        finally:
            pair.resume_replay()


def _pipeline(primary: str, *args: str, read: str | None = None):  # type: ignore[no-untyped-def]
    # The read URL after the command, where people add a flag to the line they ran.
    flag = ["--read-database-url", read] if read else []
    return runner.invoke(app, ["--database-url", primary, "pipeline", *args, *flag])


def test_report_and_audit_read_the_standby_and_archive_deletes_on_the_primary(
    spark: SparkSession, lagging: tuple[str, str], tmp_path: Path
) -> None:
    primary, standby = lagging

    in_process = _pipeline(primary, "report", "-o", str(tmp_path / "r1"), read=standby)
    assert in_process.exit_code == 0, in_process.output
    assert "4 half messages" in in_process.output and "in this process" in in_process.output
    # Hours are closed as of what the standby holds: its last replayed commit, not its clock.
    with psycopg.connect(standby) as conn:
        (replayed,) = conn.execute("SELECT pg_last_xact_replay_timestamp()").fetchone()  # type: ignore[misc]
    manifest = json.loads((tmp_path / "r1" / "_state" / "state.json").read_text())
    assert datetime.fromisoformat(manifest["checked_at"]) == replayed

    on_spark = _pipeline(
        primary, "report", "-o", str(tmp_path / "r2"), "--master", "local[1]", read=standby
    )
    assert on_spark.exit_code == 0, on_spark.output
    assert "4 half messages" in on_spark.output and "with Spark" in on_spark.output
    from_primary = _pipeline(primary, "report", "-o", str(tmp_path / "r3"))
    assert "5 half messages" in from_primary.output, from_primary.output

    # The late message has no barrier row: the primary's messages are not consistent,
    # the standby's are (as yet).
    audit = _pipeline(primary, "audit", "-o", str(tmp_path / "a1"), read=standby)
    assert audit.exit_code == 0, audit.output
    assert "4 half messages checked" in audit.output

    archive = _pipeline(
        primary, "archive", "--older-than", "3d", "--archive-dir", str(tmp_path / "x"), read=standby
    )
    assert archive.exit_code == 0, archive.output
    with psycopg.connect(primary) as conn:
        assert conn.execute("SELECT transaction_id FROM messages").fetchall() == [("late",)]
