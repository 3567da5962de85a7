"""`coordinator pipeline report | archive | audit`: the data pipeline's jobs.

The report runs as a Spark job when a master is named, else in this
process (--engine): on one machine, starting Spark costs more than the
report's work (docs/pipeline.md#engines).

Exit codes a scheduler can act on, each failure one sentence on stderr:
  0  done (audit: no inconsistency)
  1  the job failed (Spark or file system error), or the 'pipeline' extra is
     missing; rerunning is safe
  2  bad usage (a flag's value, an audit table or condition that is not SQL)
  4  refused: another archive run holds the database's archive lock
  5  a database cannot be reached (by the command or by a Spark task)
  6  audit: inconsistencies found (listed, and written to Parquet)
  7  archive: the Parquet copy did not verify; nothing was deleted, rerun copies again
  8  the database's schema is not at this coordinator's revision: the jobs
     never migrate (nor create) a database, `coordinator db upgrade` does
"""

from __future__ import annotations

import importlib
import logging
import os
import re
from collections.abc import Callable
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
import psycopg.errors
import typer
from psycopg.conninfo import conninfo_to_dict
from rich.console import Console
from rich.table import Table

from coordinator.cli.common import (
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    console,
    database_errors,
    database_url,
    err_console,
    fail,
    make_settings,
    settings_from,
)
from coordinator.cli.tables import Column, print_table
from coordinator.db import migrate
from coordinator.db.ready import describe_database
from coordinator.db.urls import libpq_url, redact
from coordinator.pipeline.barrier import BARRIER_KEY, BARRIER_TABLE, parse_match_on
from coordinator.pipeline.display import display_value
from coordinator.pipeline.durations import parse_duration, parse_moment
from coordinator.pipeline.session import MASTER_ENV, master_named, parse_conf

# pyspark (the optional 'pipeline' extra) is imported when a job runs, so the
# rest of the CLI starts fast and works without it.
if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from coordinator.pipeline.audit import AuditResult
    from coordinator.pipeline.manifest import RunManifest
    from coordinator.pipeline.report import ReportOptions, ReportResult

EXIT_FAILED = 1
EXIT_INCONSISTENT = 6
EXIT_NOT_VERIFIED = 7
EXIT_SCHEMA = 8
LOG_WIDTH = 160

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

app = typer.Typer(
    help="Jobs over the coordinator's tables: lifecycle report, archive, audit.",
    no_args_is_help=True,
)


@app.callback()
def pipeline_options(
    ctx: typer.Context,
    database_url: str | None = typer.Option(
        None, "--database-url", help="PostgreSQL URL (overrides the one given before 'pipeline')."
    ),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Embedded server's data."),
) -> None:
    # `python -m coordinator.pipeline` and spark-submit put the options here.
    if database_url is not None or data_dir is not None:
        current = ctx.ensure_object(dict).get("settings")
        url = database_url or (current.database_url if current else None)
        directory = data_dir or (current.data_dir if current else None)
        ctx.ensure_object(dict)["settings"] = make_settings(url, directory)


MASTER_OPTION = typer.Option(
    None,
    "--master",
    help=f"Spark master URL [default: ${MASTER_ENV}, spark-submit's, or local[*]].",
)
CONF_OPTION = typer.Option(None, "--conf", help="Spark setting key=value (repeatable).")
PARTITIONS_OPTION = typer.Option(
    None, "--partitions", min=1, help="Parallel reads per table [default: 2 per Spark core]."
)


class Engine(StrEnum):
    auto = "auto"
    spark = "spark"
    in_process = "in-process"


def _report_with_spark(engine: Engine, master: str | None, conf: list[str] | None) -> bool:
    """Whether the report runs as a Spark job; --engine in-process with Spark flags is bad usage."""
    if engine is Engine.spark:
        return True
    if engine is Engine.in_process:
        if master or conf:
            flag = "--master" if master else "--conf"
            raise _fail(
                f"--engine in-process runs no Spark: {flag} has nothing to apply to "
                "(drop it, or use --engine spark)",
                EXIT_USAGE,
            )
        return False
    return master_named(master) or bool(conf)


def _fail(message: str, code: int) -> typer.Exit:
    """fail() with the message on one line: Spark's and libpq's messages span several."""
    return fail(" ".join(message.split()), code)


def _usage(value: str, parse: Callable[[str], T]) -> T:
    try:
        return parse(value)
    except ValueError as error:
        raise _fail(str(error), EXIT_USAGE) from None


def _partitions(spark: SparkSession, requested: int | None) -> int:
    return requested or 2 * spark.sparkContext.defaultParallelism


def _require_extra() -> None:
    """Before any other work: the jobs' libraries are installed, else the command to get them."""
    try:
        for module in JOB_MODULES:
            importlib.import_module(module)
    except ImportError as error:
        missing = error.name or str(error)
        raise _fail(
            f"the pipeline needs the 'pipeline' extra ({missing} is missing): {INSTALL_EXTRA}",
            EXIT_FAILED,
        ) from None


def _known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(migrate.migrations_dir()))
    return {revision.revision for revision in script.walk_revisions()}


def _current_database(ctx: typer.Context) -> str:
    """The command's database, as it is: refused unless its schema is at this code's revision.

    The jobs read (and the archive deletes) but never migrate: a database a
    scheduler points them at is changed by `coordinator db upgrade`, by its
    operator, or not at all; an empty one is not given a schema.
    """
    url = database_url(ctx)  # neither migrates nor creates an embedded database
    settings = settings_from(ctx)
    with database_errors(settings):
        current = migrate.current_revisions(url)
    expected = migrate.head_revisions()
    if set(current) == set(expected):
        return url
    where = describe_database(settings)
    wanted = ", ".join(expected)
    if not current:
        found = "has no coordinator schema"
        remedy = "`coordinator db upgrade` creates it"
    elif set(current) <= _known_revisions():
        found = f"is at revision {', '.join(current)}"
        remedy = "`coordinator db upgrade` migrates it"
    else:
        found = f"is at revision {', '.join(current)}, newer than this coordinator knows"
        remedy = "run the pipeline of the coordinator that migrated it"
    raise _fail(
        f"the database ({where}) {found}; the pipeline needs revision {wanted} and never "
        f"migrates a database itself: {remedy}",
        EXIT_SCHEMA,
    )


def _producer_url(given: str | None, default: str) -> str:
    """--producer-database-url as psycopg takes it; a string libpq cannot parse is bad usage."""
    if given is None:
        return default
    url = libpq_url(given)
    try:
        conninfo_to_dict(url)
    except psycopg.ProgrammingError as error:
        raise _fail(
            f"--producer-database-url is not a PostgreSQL URL: {redact(str(error))}", EXIT_USAGE
        ) from None
    return url


def _spark_log_level() -> str:
    # A failed job is reported in one sentence; Spark's own log of it (stack
    # traces of every failed task) is for -v.
    return "WARN" if logging.getLogger().isEnabledFor(logging.INFO) else "OFF"


def _run_job(master: str | None, conf: list[str] | None, job: Callable[[SparkSession], T]) -> T:
    """Run a job in a Spark session; its failures become a sentence and an exit code."""
    settings = _usage(",".join(conf or []), lambda _: parse_conf(conf))
    from coordinator.pipeline.session import spark_session

    def in_session() -> T:
        with spark_session(master, settings, log_level=_spark_log_level()) as spark:
            return job(spark)

    return _guarded(in_session, spark=True)


def _guarded(job: Callable[[], T], *, spark: bool) -> T:
    """Run a job (in a Spark session, or without Spark); its failures become one
    sentence and the exit code a scheduler can act on."""
    from coordinator.pipeline.archive import ArchiveBusy, ArchiveError, ArchiveNotVerified
    from coordinator.pipeline.audit import ProducerTableError

    try:
        return job()
    except ArchiveBusy as error:
        raise _fail(str(error), EXIT_REFUSED) from None
    except ArchiveNotVerified as error:
        raise _fail(str(error), EXIT_NOT_VERIFIED) from None
    except ArchiveError as error:
        raise _fail(str(error), EXIT_FAILED) from None
    except ProducerTableError as error:
        raise _fail(str(error), EXIT_USAGE) from None
    except psycopg.Error as error:
        reason = _first_line(str(error))
        if isinstance(error, psycopg.OperationalError) and _unreachable(error.sqlstate):
            raise _fail(f"cannot reach a database: {reason}", EXIT_UNAVAILABLE) from None
        raise _fail(_job_failed(type(error).__name__, reason), EXIT_FAILED) from None
    except (typer.Exit, KeyboardInterrupt):
        raise
    except Exception as error:  # Spark, file system: the job failed, a rerun is safe
        if not spark:
            failed = _job_failed(type(error).__name__, _first_line(str(error)))
            raise _fail(failed, EXIT_FAILED) from None
        raise _spark_failure(error) from None


def _unreachable(sqlstate: str | None) -> bool:
    """A connection that failed or was lost (no SQLSTATE), or a server going away."""
    return sqlstate is None or sqlstate.startswith(UNREACHABLE_SQLSTATES)


def _spark_failure(error: Exception) -> typer.Exit:
    """A failure Spark reports: one line of it, exit 5 if a task could not reach a database."""
    text = str(error)
    # An error raised in a Python worker (a Spark task, the data source)
    # reaches the driver as the worker's traceback text: its first line that
    # is not indented is the exception's type and message.
    _, traceback, raised_in_worker = text.partition(_TRACEBACK)
    raised = _WORKER_ERROR.search(raised_in_worker) if traceback else None
    if raised is None:
        return _fail(_job_failed(type(error).__name__, _first_line(text), spark=True), EXIT_FAILED)
    module, _, name = raised.group(1).rpartition(".")
    message = raised.group(2) or "no message"
    if module.split(".")[0] == "psycopg":
        kind = getattr(psycopg.errors, name, None)
        if (
            isinstance(kind, type)
            and issubclass(kind, psycopg.OperationalError)
            and _unreachable(kind.sqlstate)
        ):
            return _fail(f"a Spark task cannot reach a database: {message}", EXIT_UNAVAILABLE)
    return _fail(_job_failed(name, message, spark=True), EXIT_FAILED)


def _job_failed(kind: str, message: str, *, spark: bool = False) -> str:
    hint = ", -v shows Spark's log" if spark and _spark_log_level() == "OFF" else ""
    return f"the job failed ({kind}: {message}); rerunning is safe{hint}"


def _first_line(text: str) -> str:
    """The first line that says something (py4j's own lines only name a Java method)."""
    for line in text.splitlines():
        line = line.strip().removeprefix(": ")
        if line and not line.startswith(_PY4J_PREAMBLE):
            return line
    return text.strip()


def _out() -> Console:
    # A scheduler's log is no terminal: print tables whole instead of
    # squeezing them into 80 columns.
    return console if console.is_terminal else Console(file=console.file, width=LOG_WIDTH)


def _fmt(value: Any) -> str:
    return display_value(value, decimals=2)


@app.command()
def report(
    ctx: typer.Context,
    output: Path = typer.Option(Path("pipeline-report"), "--output", "-o", help="Output dir."),
    archive_dir: Path | None = typer.Option(
        None, "--archive-dir", help="Also read the messages archived here."
    ),
    as_of: str | None = typer.Option(
        None, "--as-of", help="Pending ages as of this ISO time [default: now]."
    ),
    state_dir: Path | None = typer.Option(
        None,
        "--state-dir",
        help="Where the closed hours' figures are kept between runs [default: OUTPUT/_state].",
    ),
    full: bool = typer.Option(
        False, "--full", help="Read and recompute every hour, whatever is stored."
    ),
    engine: Engine = typer.Option(
        Engine.auto,
        "--engine",
        case_sensitive=False,
        help="spark: a Spark job (local[*] unless a master is named); in-process: threads of "
        "this command, no JVM; auto: spark when a master is named (--master, "
        f"${MASTER_ENV}, spark-submit) or --conf is given, else in-process.",
    ),
    master: str | None = MASTER_OPTION,
    conf: list[str] | None = CONF_OPTION,
    partitions: int | None = typer.Option(
        None,
        "--partitions",
        min=1,
        help="Parallel reads of PostgreSQL [default: 2 per Spark core; in-process: 1 per CPU].",
    ),
) -> None:
    """Lifecycle figures per producer group, topic and hour: Parquet, charts, HTML."""
    moment = _usage(as_of, parse_moment) if as_of else None
    with_spark = _report_with_spark(engine, master, conf)
    _require_extra()
    url = _current_database(ctx)

    def options(reads: int) -> ReportOptions:
        from coordinator.pipeline.report import ReportOptions

        return ReportOptions(output, archive_dir, moment, reads, state_dir=state_dir, full=full)

    def in_spark(spark: SparkSession) -> ReportResult:
        from coordinator.pipeline.progress import ConsoleProgress
        from coordinator.pipeline.report import run_report

        chosen = options(_partitions(spark, partitions))
        return run_report(spark, url, chosen, progress=ConsoleProgress(err_console, spark))

    def in_process() -> ReportResult:
        from coordinator.pipeline.progress import ConsoleProgress
        from coordinator.pipeline.report import run_report

        chosen = options(partitions or os.cpu_count() or 1)
        return run_report(None, url, chosen, progress=ConsoleProgress(err_console))

    result = _run_job(master, conf, in_spark) if with_spark else _guarded(in_process, spark=False)
    headers = {
        "producer_group": "group",
        "topic": "topic",
        "messages": "msgs",
        "committed": "commit",
        "rolled_back": "rollbk",
        "discarded": "discard",
        "expired": "expire",
        "prepared": "pending",
        "latency_p50_s": "p50 s",
        "latency_p99_s": "p99 s",
    }
    # Groups and topics are names users copy into the next command: whole.
    print_table(
        _out(),
        f"Half messages by producer group and topic (as of {_fmt(result.as_of)})",
        [
            Column(header, whole=column in ("producer_group", "topic"), right=i >= 2)
            for i, (column, header) in enumerate(headers.items())
        ],
        [[_fmt(row[c]) for c in headers] for row in result.totals[:30]],
    )
    if len(result.totals) > 30:
        console.print(
            f"... {len(result.totals) - 30} more in {output / 'figures_total'}", soft_wrap=True
        )
    lag = (
        "no consumer_lag view"
        if result.consumer_lag is None
        else f"{len(result.consumer_lag)} subscriptions"
    )
    console.print(
        f"{result.messages:,} half messages, {result.groups} producer group/topic pairs, "
        f"{result.hours} hours; consumer lag: {lag}; {len(result.charts)} charts.",
        highlight=False,
        soft_wrap=True,
    )
    archived = (
        f" and {result.archive_rows:,} archived ({len(result.archive_days)} days)"
        if archive_dir is not None
        else ""
    )
    reused = "" if result.full else f"; {result.hours_reused:,} closed hours reused from the state"
    how = "with Spark" if with_spark else "in this process (no Spark)"
    console.print(
        f"read {result.database_rows:,} rows from PostgreSQL{archived}{reused}, {how}.",
        highlight=False,
        soft_wrap=True,
    )
    console.print(f"report: {result.html}", highlight=False, soft_wrap=True)


@app.command()
def archive(
    ctx: typer.Context,
    older_than: str = typer.Option(
        "72h", "--older-than", help="Archive messages resolved longer ago than this (e.g. 72h, 7d)."
    ),
    archive_dir: Path = typer.Option(Path("archive"), "--archive-dir", help="Parquet archive."),
    batch_size: int = typer.Option(
        10_000, "--batch-size", min=1, help="Messages deleted per database transaction."
    ),
    master: str | None = MASTER_OPTION,
    conf: list[str] | None = CONF_OPTION,
    partitions: int | None = PARTITIONS_OPTION,
) -> None:
    """Copy resolved messages and their history to Parquet, verify, delete from PostgreSQL."""
    age = _usage(older_than, parse_duration)
    if age <= timedelta(0):
        raise _fail("--older-than must be positive", EXIT_USAGE)
    _require_extra()
    url = _current_database(ctx)

    def job(spark: SparkSession) -> list[RunManifest]:
        from coordinator.pipeline.archive import ArchiveOptions, run_archive
        from coordinator.pipeline.progress import ConsoleProgress

        options = ArchiveOptions(archive_dir, age, batch_size, _partitions(spark, partitions))
        return run_archive(spark, url, options, progress=ConsoleProgress(err_console, spark))

    runs = _run_job(master, conf, job)
    headers = ("run", "resolved before", "partitions", "messages", "history", "deleted", "kept")
    print_table(
        _out(),
        f"Archive runs ({archive_dir})",
        [Column(h, whole=h == "run", right=h not in ("run", "resolved before")) for h in headers],
        [
            [
                run.run_id,
                run.cutoff[:19].replace("T", " "),
                _fmt(len(run.partitions)),
                _fmt(run.messages),
                _fmt(run.history),
                _fmt(run.deleted),
                _fmt(len(run.kept)),
            ]
            for run in runs
        ],
    )
    for run in runs:
        if run.kept:
            console.print(
                f"run {run.run_id}: {len(run.kept)} messages gained a delivery while being "
                f"archived and stay in PostgreSQL (offsets {', '.join(map(str, run.kept[:10]))})",
                highlight=False,
                soft_wrap=True,
            )


@app.command()
def audit(
    ctx: typer.Context,
    producer_database_url: str | None = typer.Option(
        None,
        "--producer-database-url",
        envvar="COORDINATOR_PRODUCER_DATABASE_URL",
        help="The producer's database [default: the coordinator's].",
    ),
    table: str = typer.Option(BARRIER_TABLE, "--table", help="Producer table (schema.table ok)."),
    key: str = typer.Option(BARRIER_KEY, "--key", help="Its column matched with --match-on."),
    committed_when: str | None = typer.Option(
        None,
        "--committed-when",
        help="SQL condition on the table meaning 'committed' "
        "[default: outcome = 'committed' for coordinator_barrier, else any row].",
    ),
    match_on: str = typer.Option(
        "transaction_id",
        "--match-on",
        help="Message side of the match: transaction_id, message_id or property:NAME.",
    ),
    producer_group: list[str] | None = typer.Option(
        None, "--producer-group", help="Only these producer groups (repeatable) [default: all]."
    ),
    pending_longer_than: str = typer.Option(
        "1h", "--pending-longer-than", help="Flag transactions still prepared after this."
    ),
    archive_dir: Path | None = typer.Option(
        None, "--archive-dir", help="Also audit the messages archived here."
    ),
    output: Path = typer.Option(Path("pipeline-audit"), "--output", "-o", help="Output dir."),
    as_of: str | None = typer.Option(
        None, "--as-of", help="Ages as of this ISO time [default: now]."
    ),
    show: int = typer.Option(50, "--show", min=0, help="Inconsistencies listed on screen."),
    master: str | None = MASTER_OPTION,
    conf: list[str] | None = CONF_OPTION,
    partitions: int | None = PARTITIONS_OPTION,
) -> None:
    """List every inconsistency between the coordinator's outcomes and a producer's table."""
    threshold = _usage(pending_longer_than, parse_duration)
    moment = _usage(as_of, parse_moment) if as_of else None
    _usage(match_on, parse_match_on)
    _require_extra()
    url = _current_database(ctx)
    producer_url = _producer_url(producer_database_url, default=url)

    def job(spark: SparkSession) -> AuditResult:
        from coordinator.pipeline.audit import AuditOptions, ProducerTable, run_audit
        from coordinator.pipeline.progress import ConsoleProgress

        producer = ProducerTable(
            url=producer_url,
            table=table,
            key=key,
            committed_when=committed_when,
        )
        options = AuditOptions(
            producer=producer,
            match_on=match_on,
            producer_groups=tuple(producer_group or ()),
            pending_longer_than=threshold,
            archive_dir=archive_dir,
            output_dir=output,
            as_of=moment,
            partitions=_partitions(spark, partitions),
        )
        return run_audit(spark, url, options, progress=ConsoleProgress(err_console, spark))

    result = _run_job(master, conf, job)

    columns = ("kind", "message_offset", "transaction_id", "producer_group", "topic", "state")
    columns += ("local_outcome", "born_at")
    # The ids are what a user looks up next (`coordinator inspect`): never cut.
    whole = {"message_offset", "transaction_id", "producer_group", "topic"}
    if result.total:
        print_table(
            _out(),
            f"Inconsistencies (first {min(show, result.total)} of {result.total})",
            [Column(c.replace("_", " "), whole=c in whole) for c in columns],
            [[_fmt(row[c]) for c in columns] for row in result.rows[:show]],
        )
    summary = Table(title=f"Audit against {table} in {redact(producer_url)}")
    summary.add_column("inconsistency")
    summary.add_column("count", justify="right")
    for kind, count in result.counts.items():
        summary.add_row(kind.replace("_", " "), _fmt(count))
    _out().print(summary)
    console.print(
        f"{result.messages:,} half messages checked against {result.producer_rows:,} producer "
        f"keys as of {_fmt(result.as_of)}; list: {result.output}",
        highlight=False,
        soft_wrap=True,
    )
    if result.total:
        raise typer.Exit(EXIT_INCONSISTENT)
