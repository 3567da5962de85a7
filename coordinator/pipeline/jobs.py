"""The pipeline's three jobs as the commands run them: where, with which options, with progress.

`coordinator pipeline report | archive | audit` (cli/pipeline.py) parse
their flags and print the results; this module chooses the engine, starts
Spark and runs the job. The job modules (pyspark, pyarrow) are imported
when a job runs, so the CLI starts fast and works without the extra.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from coordinator.pipeline.runner import (
    JobError,
    Outcome,
    run_in_process,
    run_in_spark,
    spark_partitions,
)
from coordinator.pipeline.session import master_named

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from coordinator.pipeline.audit import AuditResult
    from coordinator.pipeline.manifest import RunManifest
    from coordinator.pipeline.report import ReportResult


class Engine(StrEnum):
    auto = "auto"
    spark = "spark"
    in_process = "in-process"


@dataclass(frozen=True)
class SparkOptions:
    """Where a Spark job runs: the master, its settings, and the parallel reads asked for."""

    master: str | None = None
    conf: Sequence[str] = ()
    partitions: int | None = None  # default: 2 per Spark core


def report_uses_spark(engine: Engine, spark: SparkOptions) -> bool:
    """Whether the report runs as a Spark job; in-process with Spark settings is bad usage."""
    if engine is Engine.spark:
        return True
    if engine is Engine.in_process:
        if spark.master or spark.conf:
            flag = "--master" if spark.master else "--conf"
            raise JobError(
                f"--engine in-process runs no Spark: {flag} has nothing to apply to "
                "(drop it, or use --engine spark)",
                Outcome.usage,
            )
        return False
    return master_named(spark.master) or bool(spark.conf)


def report(
    url: str,
    *,
    output: Path,
    archive_dir: Path | None,
    as_of: datetime | None,
    state_dir: Path | None,
    full: bool,
    with_spark: bool,
    spark: SparkOptions,
    progress: Console,
) -> ReportResult:
    """The lifecycle report, as a Spark job or in threads of this process (1 read per CPU)."""

    def run(spark_session: SparkSession | None, reads: int) -> ReportResult:
        from coordinator.pipeline.progress import ConsoleProgress
        from coordinator.pipeline.report import ReportOptions, run_report

        options = ReportOptions(output, archive_dir, as_of, reads, state_dir=state_dir, full=full)
        shown = ConsoleProgress(progress, spark_session)
        return run_report(spark_session, url, options, progress=shown)

    if with_spark:
        return run_in_spark(
            spark.master,
            spark.conf,
            lambda session: run(session, spark_partitions(session, spark.partitions)),
        )
    return run_in_process(lambda: run(None, spark.partitions or os.cpu_count() or 1))


def archive(
    url: str,
    *,
    archive_dir: Path,
    older_than: timedelta,
    batch_size: int,
    spark: SparkOptions,
    progress: Console,
) -> list[RunManifest]:
    """Copy resolved messages to Parquet, verify, delete them from PostgreSQL (a Spark job)."""

    def job(session: SparkSession) -> list[RunManifest]:
        from coordinator.pipeline.archive import ArchiveOptions, run_archive
        from coordinator.pipeline.progress import ConsoleProgress

        reads = spark_partitions(session, spark.partitions)
        options = ArchiveOptions(archive_dir, older_than, batch_size, reads)
        return run_archive(session, url, options, progress=ConsoleProgress(progress, session))

    return run_in_spark(spark.master, spark.conf, job)


@dataclass(frozen=True)
class AuditRequest:
    """What the audit compares: the producer's table, and which messages, as of when."""

    producer_url: str
    table: str
    key: str
    committed_when: str | None
    match_on: str
    producer_groups: tuple[str, ...]
    pending_longer_than: timedelta
    archive_dir: Path | None
    output: Path
    as_of: datetime | None


def audit(
    url: str, request: AuditRequest, *, spark: SparkOptions, progress: Console
) -> AuditResult:
    """Every inconsistency between the coordinator's outcomes and a producer's table."""

    def job(session: SparkSession) -> AuditResult:
        from coordinator.pipeline.audit import AuditOptions, ProducerTable, run_audit
        from coordinator.pipeline.progress import ConsoleProgress

        producer = ProducerTable(
            url=request.producer_url,
            table=request.table,
            key=request.key,
            committed_when=request.committed_when,
        )
        options = AuditOptions(
            producer=producer,
            match_on=request.match_on,
            producer_groups=request.producer_groups,
            pending_longer_than=request.pending_longer_than,
            archive_dir=request.archive_dir,
            output_dir=request.output,
            as_of=request.as_of,
            partitions=spark_partitions(session, spark.partitions),
        )
        return run_audit(session, url, options, progress=ConsoleProgress(progress, session))

    return run_in_spark(spark.master, spark.conf, job)
