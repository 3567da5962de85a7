"""The pipeline on a real Spark standalone cluster: a master and two workers on loopback.

`coordinator pipeline report | archive --master spark://...` and the audit
under spark-submit run as processes of their own (this process holds the
tests' local SparkContext), their tasks in the workers' executors, which
read PostgreSQL themselves. The figures must equal SQL's and the local
run's; an archive run whose driver is killed while the executors write,
then rerun, must move exactly the archivable rows; the audit must find
what was planted. Each job's tasks must have run on both workers.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import psycopg
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

import coordinator.pipeline.__main__ as pipeline_entry
from bench.report_figures import assert_equal_figures, assert_same_datasets, sql_figures
from coordinator.pipeline import manifest
from coordinator.pipeline.audit import (
    DELIVERED_WITHOUT_LOCAL_COMMIT,
    LOCAL_COMMIT_WITHOUT_DELIVERY,
    PENDING_TOO_LONG,
)
from coordinator.pipeline.manifest import RunStatus
from coordinator.pipeline.report import ReportOptions, run_report
from coordinator.pipeline.tables import MESSAGES
from tests.pipeline.data import add_message, parquet_column
from tests.pipeline.test_archive import (  # noqa: F401  (planted: a fixture)
    _assert_exactly_once,
    _history_ids,
    _live_ids,
    planted,
)
from tests.pipeline.test_audit import BARRIER_DDL
from tests.pipeline.test_report import AS_OF, history  # noqa: F401  (history: a fixture)
from tests.processes import exited_within, stop_group
from tests.spark_cluster import SparkCluster, spark_class, spark_cluster

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
JOB_SECONDS = 300.0  # bounded: a job here takes well under a minute
EXIT_INCONSISTENT = 6
# Every job takes one core of each worker and waits for both executors
# before its first task, so each worker gets a share of the tasks.
CLUSTER_CONF = (
    "spark.cores.max=2",
    "spark.scheduler.minRegisteredResourcesRatio=1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime=120s",
    "spark.sql.shuffle.partitions=4",
    "spark.ui.enabled=false",
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with spark_cluster(tmp_path_factory.mktemp("spark-cluster"), workers=2) as running:
        yield running


@dataclass
class Job:
    app_name: str
    returncode: int
    output: str


def _run(cluster: SparkCluster, command: list[str], app_name: str, log: Path) -> Job:
    """Run a driver process to its end (bounded), its whole group stopped afterwards."""
    with log.open("wb") as output:
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env=cluster.environment(),
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        finished = exited_within(process, JOB_SECONDS)
    finally:
        stop_group(process)
    text = log.read_text(errors="replace")
    assert finished, f"{app_name} did not finish within {JOB_SECONDS:.0f} s:\n{text}"
    assert process.returncode is not None
    return Job(app_name, process.returncode, text)


def _conf(app_name: str) -> list[str]:
    return [
        arg for pair in (*CLUSTER_CONF, f"spark.app.name={app_name}") for arg in ("--conf", pair)
    ]


def pipeline(
    cluster: SparkCluster, database_url: str, workdir: Path, app_name: str, *args: str
) -> Job:
    """`coordinator pipeline COMMAND ... --master spark://...` as a process of its own."""
    command = [
        sys.executable,
        "-m",
        "coordinator",
        "--database-url",
        database_url,
        "pipeline",
        *args,
        "--master",
        cluster.master_url,
        *_conf(app_name),
    ]
    return _run(cluster, command, app_name, workdir / f"{app_name}.log")


def spark_submit(
    cluster: SparkCluster, database_url: str, workdir: Path, app_name: str, *args: str
) -> Job:
    """`spark-submit ... <python -m coordinator.pipeline's file> COMMAND ...`, as documented."""
    command = [
        str(spark_class().with_name("spark-submit")),
        "--master",
        cluster.master_url,
        # the driver's and the executors' interpreter: the one with the coordinator package
        "--conf",
        f"spark.pyspark.python={sys.executable}",
        str(pipeline_entry.__file__),
        "--database-url",
        database_url,
        *args,
        # the command's own --conf: its session would name the application otherwise
        *_conf(app_name),
    ]
    return _run(cluster, command, app_name, workdir / f"{app_name}.log")


def recording_python(directory: Path) -> tuple[Path, Path]:
    """An interpreter that notes each start in a file, then runs this one: (it, the file)."""
    directory.mkdir(parents=True, exist_ok=True)
    python, starts = directory / "python", directory / "starts"
    python.write_text(f'#!/bin/sh\necho "$$" >> "{starts}"\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return python, starts


def assert_ran_on_both_workers(cluster: SparkCluster, job: Job) -> None:
    """The job was an application of the master, and each worker's executor ran tasks of it."""
    (app,) = cluster.applications(job.app_name)
    deadline = time.monotonic() + 30  # the master marks an application finished shortly after
    while app["state"] != "FINISHED" and time.monotonic() < deadline:
        time.sleep(0.5)
        (app,) = cluster.applications(job.app_name)
    assert app["state"] == "FINISHED", app
    tasks = cluster.finished_tasks(app["id"])
    assert len(tasks) == 2 and all(count > 0 for count in tasks), (app["id"], tasks)


# --- report ---------------------------------------------------------------------------------


def test_the_report_on_the_cluster_equals_sql_and_the_local_run(
    cluster: SparkCluster,
    spark: SparkSession,
    database_url: str,
    db: psycopg.Connection,
    history: None,  # noqa: F811
    tmp_path: Path,
) -> None:
    out = tmp_path / "cluster-report"
    python, starts = recording_python(tmp_path / "python")
    job = pipeline(
        cluster,
        database_url,
        tmp_path,
        "cluster-report",
        "report",
        "-o",
        str(out),
        "--as-of",
        AS_OF.isoformat(),
        "--partitions",
        "4",
        "--conf",
        f"spark.pyspark.python={python}",
    )
    assert job.returncode == 0, job.output
    assert "2,501 half messages" in job.output
    assert_ran_on_both_workers(cluster, job)
    # the executors' Python workers run the interpreter the command named
    assert starts.exists() and starts.read_text().split()

    sql = sql_figures(database_url, AS_OF)
    assert len(sql.hourly) > 60  # 3 groups x 3 topics x ~30 hours, and the solo group
    assert_equal_figures(out, sql)
    local = tmp_path / "local-report"
    run_report(spark, database_url, ReportOptions(local, as_of=AS_OF, partitions=3))
    assert_same_datasets(out, local)
    lag = db.execute("SELECT consumer_group, topic, lag, dead_letters FROM consumer_lag").fetchall()
    stored = pq.read_table(out / "consumer_lag").to_pylist()
    assert lag == [(r["consumer_group"], r["topic"], r["lag"], r["dead_letters"]) for r in stored]
    assert lag[0][3] == 1  # the dead letter planted by the history fixture
    assert (out / "report.html").exists()


# --- archive --------------------------------------------------------------------------------


def _archive_args(archive: Path) -> list[str]:
    return [
        "archive",
        "--older-than",
        "72h",
        "--archive-dir",
        str(archive),
        "--batch-size",
        "25",
        "--partitions",
        "3",
    ]


def crash_archive(
    cluster: SparkCluster, database_url: str, workdir: Path, archive: Path, *kill: str
) -> Job:
    """An archive run on the cluster whose driver is SIGKILLed mid-run (see crashing_archive)."""
    app_name = "cluster-archive-killed-" + "-".join(k.strip("-").replace(":", "-") for k in kill)
    command = [
        sys.executable,
        "-m",
        "tests.pipeline.crashing_archive",
        "--database-url",
        database_url,
        "--archive-dir",
        str(archive),
        "--master",
        cluster.master_url,
        *_conf(app_name),
        "--kill-at",
        *kill,
    ]
    return _run(cluster, command, app_name, workdir / f"{app_name}.log")


def test_the_archive_killed_while_executors_write_then_rerun_moves_each_row_exactly_once(
    cluster: SparkCluster,
    database_url: str,
    db: psycopg.Connection,
    planted: dict[str, set[int]],  # noqa: F811
    tmp_path: Path,
) -> None:
    history_ids = _history_ids(db, planted["eligible"])
    archive = tmp_path / "archive"
    # Killed after the executors wrote the messages' staging copy, while they
    # write the history's: tasks in flight, the archive lock held.
    crashed = crash_archive(
        cluster, database_url, tmp_path, archive, "copied-messages", "--while-tasks-run"
    )
    assert crashed.returncode == -9, (crashed.returncode, crashed.output)
    assert "killing the driver while tasks run after copied-messages" in crashed.output
    assert parquet_column(archive, MESSAGES, "id") == []  # nothing published
    assert planted["eligible"] <= _live_ids(db)  # nothing deleted
    (unfinished,) = manifest.unfinished_runs(archive)
    assert unfinished.status is RunStatus.PLANNED

    rerun = pipeline(
        cluster, database_url, tmp_path, "cluster-archive-rerun", *_archive_args(archive)
    )
    assert rerun.returncode == 0, rerun.output
    # the whole run again, on the cluster: copy, verify, publish, delete
    assert f"resuming archive run {unfinished.run_id} from step 'planned'" in rerun.output
    assert f"deleting {len(planted['eligible'])} archived messages" in rerun.output
    assert_ran_on_both_workers(cluster, rerun)
    _assert_exactly_once(db, archive, planted, history_ids)


# --- audit ----------------------------------------------------------------------------------


def test_the_audit_on_the_cluster_finds_the_planted_inconsistencies(
    cluster: SparkCluster, database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    now = db.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    recent = now - timedelta(minutes=20)
    plan = {
        # transaction id: (state, born, the producer's local outcome or None)
        "c-ok": ("committed", recent, "committed"),
        "c-missing": ("committed", recent, None),
        "c-marker": ("committed", recent, "rolled_back"),
        "rb-ok": ("rolled_back", recent, "rolled_back"),
        "rb-committed": ("rolled_back", recent, "committed"),
        "disc-committed": ("discarded", recent, "committed"),
        "exp-committed": ("expired", now - timedelta(days=8), "committed"),
        "p-old": ("prepared", now - timedelta(hours=3), None),
        "p-young": ("prepared", now - timedelta(minutes=5), None),
    }
    db.execute(BARRIER_DDL)  # the producer's table, in the coordinator's database here
    for n in range(40):  # consistent ones, so that every task has rows to read
        plan[f"fine-{n}"] = ("committed", recent - timedelta(minutes=n), "committed")
    for tx, (state, born, outcome) in plan.items():
        add_message(db, transaction_id=tx, state=state, born_at=born)
        if outcome:
            db.execute("INSERT INTO coordinator_barrier VALUES (%s, %s)", (tx, outcome))

    out = tmp_path / "audit"
    job = spark_submit(
        cluster,
        database_url,
        tmp_path,
        "cluster-audit",
        "audit",
        "-o",
        str(out),
        "--partitions",
        "4",
    )
    assert job.returncode == EXIT_INCONSISTENT, job.output
    assert_ran_on_both_workers(cluster, job)
    found: dict[str, set[str]] = {}
    for row in pq.read_table(out / "inconsistencies").to_pylist():
        found.setdefault(row["kind"], set()).add(row["transaction_id"])
    assert found == {
        DELIVERED_WITHOUT_LOCAL_COMMIT: {"c-missing", "c-marker"},
        LOCAL_COMMIT_WITHOUT_DELIVERY: {"rb-committed", "disc-committed", "exp-committed"},
        PENDING_TOO_LONG: {"p-old"},
    }
    assert "c-missing" in job.output and "pending too long" in job.output
