"""`coordinator pipeline ...`: summaries, files, and exit codes a scheduler can act on."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
import typer
from pyspark.sql import SparkSession
from rich.console import Console
from typer.testing import CliRunner

import coordinator.pipeline.__main__ as pipeline_main
from coordinator.cli import app
from coordinator.cli.pipeline import _job_errors
from coordinator.pipeline.runner import run_in_spark
from coordinator.pipeline.source import FORMAT
from tests.pipeline.data import add_message

runner = CliRunner()
UNREACHABLE = "postgresql://x@127.0.0.1:1/db"

BARRIER = (
    "CREATE TABLE coordinator_barrier (transaction_id text PRIMARY KEY, outcome text NOT NULL, "
    "created_at timestamptz NOT NULL DEFAULT now())"
)


def invoke(database_url: str, *args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, ["--database-url", database_url, "pipeline", *args])


@pytest.fixture
def messages(db: psycopg.Connection) -> None:
    """Old resolved messages, a recent one, and one commit its producer never made."""
    now = db.execute("SELECT now()").fetchone()[0]
    db.execute(BARRIER)  # the producer's table, here in the same database
    for n in range(6):
        add_message(
            db, transaction_id=f"old-{n}", born_at=now - timedelta(days=5), topic=f"t{n % 2}"
        )
        db.execute("INSERT INTO coordinator_barrier VALUES (%s, 'committed')", (f"old-{n}",))
    add_message(db, transaction_id="unbacked", born_at=now - timedelta(minutes=2))


def test_report_archive_and_audit_from_the_command_line(
    spark: SparkSession,
    database_url: str,
    db: psycopg.Connection,
    messages: None,
    tmp_path: Path,
) -> None:
    report = invoke(database_url, "report", "-o", str(tmp_path / "report"), "--partitions", "2")
    assert report.exit_code == 0, report.output
    assert "7 half messages" in report.output and "report.html" in report.output
    assert "in this process (no Spark)" in report.output  # no master named: no Spark
    assert (tmp_path / "report" / "report.html").exists()
    on_spark = invoke(
        database_url, "report", "-o", str(tmp_path / "on-spark"), "--master", "local[1]"
    )
    assert on_spark.exit_code == 0, on_spark.output
    assert "7 half messages" in on_spark.output and "with Spark" in on_spark.output

    archive = invoke(
        database_url,
        "archive",
        "--older-than",
        "3d",
        "--archive-dir",
        str(tmp_path / "a"),
        "--batch-size",
        "2",
    )
    assert archive.exit_code == 0, archive.output
    assert "Archive runs" in archive.output and "deleting 6 archived messages" in archive.output
    assert len(list((tmp_path / "a" / "messages").glob("*/*/*.parquet"))) == 2

    audit = invoke(
        database_url, "audit", "--archive-dir", str(tmp_path / "a"), "-o", str(tmp_path / "audit")
    )
    assert audit.exit_code == 6, audit.output
    assert "unbacked" in audit.output and "delivered without local commit" in audit.output
    db.execute("INSERT INTO coordinator_barrier VALUES ('unbacked', 'committed')")
    clean = invoke(database_url, "audit", "-o", str(tmp_path / "audit"))
    assert clean.exit_code == 0, clean.output


def test_an_80_column_terminal_gets_the_audits_ids_whole(
    spark: SparkSession,
    database_url: str,
    db: psycopg.Connection,
    messages: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    transaction_id = "order-2026-11-24-" + "7f3a9c" * 6
    group = "payments-settlement-eu-west-1"
    now = db.execute("SELECT now()").fetchone()[0]
    add_message(
        db, transaction_id=transaction_id, producer_group=group, topic="settlements", born_at=now
    )
    monkeypatch.setattr("coordinator.cli.pipeline.console", Console(force_terminal=True, width=80))
    audit = invoke(database_url, "audit", "--producer-group", group, "-o", str(tmp_path / "audit"))
    assert audit.exit_code == 6, audit.output
    lines = audit.output.splitlines()
    assert any(transaction_id in line for line in lines), audit.output
    assert any(group in line for line in lines), audit.output
    assert max(len(line) for line in lines if "│" in line or "─" in line) <= 80


@pytest.mark.parametrize(
    "args",
    [
        ("archive", "--older-than", "soon"),
        ("report", "--conf", "no-equals-sign"),
        ("report", "--engine", "in-process", "--master", "local[1]"),
        ("report", "--engine", "in-process", "--conf", "spark.ui.enabled=false"),
        ("audit", "--match-on", "body"),
        ("audit", "--as-of", "yesterday"),
        ("audit", "--table", "no_such_table"),
        ("audit", "--committed-when", "no_such_column = 1"),
        ("audit", "--producer-database-url", "mysql://shop:secret@127.0.0.1/shop"),
        (
            "audit",
            "--producer-database-url",
            "postgresql://shop@127.0.0.1:1/shop?connect_timeout=soon",
        ),
    ],
)
def test_bad_flag_values_exit_2(
    spark: SparkSession, database_url: str, messages: None, args: tuple[str, ...]
) -> None:
    result = invoke(database_url, *args)
    assert result.exit_code == 2, result.output
    (line,) = result.output.splitlines()  # one sentence, never a traceback or SQL excerpt
    assert line.startswith("error: ") and "secret" not in line


def test_a_busy_archive_exits_4(spark: SparkSession, database_url: str, tmp_path: Path) -> None:
    with psycopg.connect(database_url, autocommit=True) as other:
        other.execute(
            "SELECT pg_advisory_lock(hashtextextended('coordinator pipeline archive', 7))"
        )
        result = invoke(database_url, "archive", "--archive-dir", str(tmp_path))
    assert result.exit_code == 4 and "another archive run" in result.output


def test_the_archive_writes_to_the_archive_dir_setting_by_default(
    spark: SparkSession, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The directory `serve` archives first to: set once for both.
    monkeypatch.setenv("COORDINATOR_ARCHIVE_DIR", str(tmp_path / "from-setting"))
    with psycopg.connect(database_url, autocommit=True) as other:
        other.execute(
            "SELECT pg_advisory_lock(hashtextextended('coordinator pipeline archive', 7))"
        )
        result = invoke(database_url, "archive")  # refused once it has made its directory
    assert result.exit_code == 4, result.output
    assert (tmp_path / "from-setting").is_dir()


def test_an_unreachable_producer_database_exits_5(
    spark: SparkSession, database_url: str, tmp_path: Path
) -> None:
    result = invoke(
        database_url,
        "audit",
        "--producer-database-url",
        "postgresql://nobody@/nowhere?host=/nonexistent",
        "-o",
        str(tmp_path),
    )
    assert result.exit_code == 5, result.output
    (line,) = result.output.splitlines()
    assert line.startswith("error: cannot reach a database: ") and "/nonexistent" in line


def _run_job(job: Callable[[SparkSession], object]) -> object:
    """A job run as the commands run theirs: its failure as a sentence and an exit code."""
    with _job_errors():
        return run_in_spark(None, None, job)


def _read_unreachable(with_schema: bool) -> Callable[[SparkSession], int]:
    def job(session: SparkSession) -> int:
        # Without a schema the data source asks the database for one when the
        # query is planned; with one, the first contact is in the tasks.
        reader = session.read.format(FORMAT).schema("id long") if with_schema else None
        reader = reader or session.read.format(FORMAT)
        return reader.option("url", UNREACHABLE).option("query", "SELECT 1 AS id").load().count()

    return job


@pytest.mark.parametrize("with_schema", [False, True], ids=["planning", "tasks"])
def test_a_database_spark_cannot_reach_exits_5_with_one_sentence(
    spark: SparkSession, capsys: pytest.CaptureFixture[str], with_schema: bool
) -> None:
    with pytest.raises(typer.Exit) as stopped:
        _run_job(_read_unreachable(with_schema))
    assert stopped.value.exit_code == 5
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        "error: a Spark task cannot reach a database: connection failed: connection to server "
        'at "127.0.0.1", port 1 failed: Connection refused'
    )


def test_a_failed_spark_job_exits_1_with_one_sentence(
    spark: SparkSession, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(typer.Exit) as stopped:
        _run_job(lambda session: session.read.parquet(str(tmp_path / "none")).count())
    assert stopped.value.exit_code == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: the job failed (AnalysisException: [PATH_NOT_FOUND] Path ")
    assert line.endswith("rerunning is safe, -v shows Spark's log")

    def fails_in_a_task(session: SparkSession) -> list[int]:
        numbers = session.sparkContext.parallelize([1, 2], 2)
        return numbers.map(lambda n: [][n]).collect()

    with pytest.raises(typer.Exit) as stopped:
        _run_job(fails_in_a_task)
    assert stopped.value.exit_code == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: the job failed (IndexError: list index out of range); ")


@pytest.mark.slow
def test_spark_submit_runs_the_same_module_unchanged(
    database_url: str, messages: None, tmp_path: Path
) -> None:
    spark_submit = Path(sys.executable).parent / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    env.pop("COORDINATOR_SPARK_MASTER", None)
    done = subprocess.run(
        [
            str(spark_submit),
            "--master",
            "local[1]",
            "--conf",
            "spark.ui.enabled=false",
            pipeline_main.__file__,
            "--database-url",
            database_url,
            "audit",
            "-o",
            str(tmp_path / "audit"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 6, done.stdout + done.stderr
    assert "unbacked" in done.stdout
