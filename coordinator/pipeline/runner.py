"""Running a pipeline job: in a Spark session or in this process, its failures as one sentence.

A scheduler runs the jobs and acts on how they end, so every failure
becomes a `JobError`: one line a person can read and an `Outcome` the
command turns into its exit code (`coordinator pipeline`, cli/pipeline.py).
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, TypeVar

import psycopg
import psycopg.errors

from coordinator.pipeline.session import parse_conf

# pyspark (the optional 'pipeline' extra) is imported when a job runs, so the
# CLI starts fast and works without it.
if TYPE_CHECKING:
    from pyspark.sql import SparkSession

INSTALL_EXTRA = "pip install 'coordinator[pipeline]'"
# Everything a job imports (pyspark, pyarrow, matplotlib), loaded up front so
# a missing library is named before a database is started or Spark is.
JOB_MODULES = (
    # Spark's Arrow paths (mapInArrow, toArrow) import pandas when a job runs.
    "pandas",
    "coordinator.pipeline.session",
    "coordinator.pipeline.progress",
    "coordinator.pipeline.report",
    "coordinator.pipeline.archive",
    "coordinator.pipeline.audit",
)
# SQLSTATE classes of a database out of reach: connection exceptions, and a
# server shutting down or starting (57P01..57P05; 57014, a cancelled query, is not).
UNREACHABLE_SQLSTATES = ("08", "57P")
_TRACEBACK = "Traceback (most recent call last):"
_WORKER_ERROR = re.compile(r"^([A-Za-z_][\w.]*)(?:: (.*))?$", re.MULTILINE)
_PY4J_PREAMBLE = ("An error occurred while calling", "An exception was thrown from the Python")

T = TypeVar("T")


class Outcome(StrEnum):
    """How a job that did not succeed ended: what a scheduler can act on."""

    failed = "failed"  # Spark or file system error, or the extra is missing: rerun
    usage = "usage"  # a flag's value, an audit table or condition that is not SQL
    refused = "refused"  # another archive run holds the database's archive lock
    unavailable = "unavailable"  # a database cannot be reached (by the command or a task)
    not_verified = "not_verified"  # the archive's copy did not verify; nothing deleted
    schema = "schema"  # the database is not at this coordinator's revision


class JobError(Exception):
    """A job that did not run to its end, said in one line."""

    def __init__(self, message: str, outcome: Outcome) -> None:
        # Spark's and libpq's messages span several lines.
        super().__init__(" ".join(message.split()))
        self.outcome = outcome


def parsed(value: str, parse: Callable[[str], T]) -> T:
    """A flag's value as `parse` reads it; a value it refuses is bad usage."""
    try:
        return parse(value)
    except ValueError as error:
        raise JobError(str(error), Outcome.usage) from None


def require_extra() -> None:
    """Before any other work: the jobs' libraries are installed, else the command to get them."""
    try:
        for module in JOB_MODULES:
            importlib.import_module(module)
    except ImportError as error:
        missing = error.name or str(error)
        raise JobError(
            f"the pipeline needs the 'pipeline' extra ({missing} is missing): {INSTALL_EXTRA}",
            Outcome.failed,
        ) from None


def spark_partitions(spark: SparkSession, requested: int | None) -> int:
    """Parallel reads per table: as asked, else 2 per Spark core."""
    return requested or 2 * spark.sparkContext.defaultParallelism


def spark_log_level() -> str:
    # A failed job is reported in one sentence; Spark's own log of it (stack
    # traces of every failed task) is for -v.
    return "WARN" if logging.getLogger().isEnabledFor(logging.INFO) else "OFF"


def run_in_spark(
    master: str | None, conf: Sequence[str] | None, job: Callable[[SparkSession], T]
) -> T:
    """Run a job in a Spark session; its failures become a `JobError`."""
    settings = parsed(",".join(conf or []), lambda _: parse_conf(list(conf or [])))
    from coordinator.pipeline.session import spark_session

    def in_session() -> T:
        with spark_session(master, settings, log_level=spark_log_level()) as spark:
            return job(spark)

    return _guarded(in_session, spark=True)


def run_in_process(job: Callable[[], T]) -> T:
    """Run a job without Spark; its failures become a `JobError`."""
    return _guarded(job, spark=False)


def _guarded(job: Callable[[], T], *, spark: bool) -> T:
    from coordinator.pipeline.archive import ArchiveBusy, ArchiveError, ArchiveNotVerified
    from coordinator.pipeline.audit import ProducerTableError

    try:
        return job()
    except ArchiveBusy as error:
        raise JobError(str(error), Outcome.refused) from None
    except ArchiveNotVerified as error:
        raise JobError(str(error), Outcome.not_verified) from None
    except ArchiveError as error:
        raise JobError(str(error), Outcome.failed) from None
    except ProducerTableError as error:
        raise JobError(str(error), Outcome.usage) from None
    except psycopg.Error as error:
        reason = _first_line(str(error))
        if isinstance(error, psycopg.OperationalError) and _unreachable(error.sqlstate):
            raise JobError(f"cannot reach a database: {reason}", Outcome.unavailable) from None
        raise JobError(_job_failed(type(error).__name__, reason), Outcome.failed) from None
    except (JobError, KeyboardInterrupt):
        raise
    except Exception as error:  # Spark, file system: the job failed, a rerun is safe
        if not spark:
            failed = _job_failed(type(error).__name__, _first_line(str(error)))
            raise JobError(failed, Outcome.failed) from None
        raise _spark_failure(error) from None


def _unreachable(sqlstate: str | None) -> bool:
    """A connection that failed or was lost (no SQLSTATE), or a server going away."""
    return sqlstate is None or sqlstate.startswith(UNREACHABLE_SQLSTATES)


def _spark_failure(error: Exception) -> JobError:
    """A failure Spark reports: one line of it, unavailable if a task could not reach a database."""
    text = str(error)
    # An error raised in a Python worker (a Spark task, the data source)
    # reaches the driver as the worker's traceback text: its first line that
    # is not indented is the exception's type and message.
    _, traceback, raised_in_worker = text.partition(_TRACEBACK)
    raised = _WORKER_ERROR.search(raised_in_worker) if traceback else None
    if raised is None:
        failed = _job_failed(type(error).__name__, _first_line(text), spark=True)
        return JobError(failed, Outcome.failed)
    module, _, name = raised.group(1).rpartition(".")
    message = raised.group(2) or "no message"
    if module.split(".")[0] == "psycopg":
        kind = getattr(psycopg.errors, name, None)
        if (
            isinstance(kind, type)
            and issubclass(kind, psycopg.OperationalError)
            and _unreachable(kind.sqlstate)
        ):
            return JobError(f"a Spark task cannot reach a database: {message}", Outcome.unavailable)
    return JobError(_job_failed(name, message, spark=True), Outcome.failed)


def _job_failed(kind: str, message: str, *, spark: bool = False) -> str:
    hint = ", -v shows Spark's log" if spark and spark_log_level() == "OFF" else ""
    return f"the job failed ({kind}: {message}); rerunning is safe{hint}"


def _first_line(text: str) -> str:
    """The first line that says something (py4j's own lines only name a Java method)."""
    for line in text.splitlines():
        line = line.strip().removeprefix(": ")
        if line and not line.startswith(_PY4J_PREAMBLE):
            return line
    return text.strip()
