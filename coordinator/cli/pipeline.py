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

The databases each job works on: pipeline_databases.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from coordinator.cli.common import (
    EXIT_REFUSED,
    EXIT_SCHEMA,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    console,
    err_console,
    fail,
    make_settings,
    settings_from,
)
from coordinator.cli.pipeline_databases import current_database, producer_url_of, read_database
from coordinator.cli.tables import Column, print_table
from coordinator.db.urls import out_of_schema, redact
from coordinator.pipeline import jobs
from coordinator.pipeline.barrier import BARRIER_KEY, BARRIER_TABLE, parse_match_on
from coordinator.pipeline.display import display_value
from coordinator.pipeline.durations import parse_duration, parse_moment
from coordinator.pipeline.jobs import Engine, SparkOptions
from coordinator.pipeline.runner import JobError, Outcome, parsed, require_extra
from coordinator.pipeline.session import MASTER_ENV

EXIT_FAILED = 1
EXIT_INCONSISTENT = 6
EXIT_NOT_VERIFIED = 7
EXIT_CODES = {
    Outcome.failed: EXIT_FAILED,
    Outcome.usage: EXIT_USAGE,
    Outcome.refused: EXIT_REFUSED,
    Outcome.unavailable: EXIT_UNAVAILABLE,
    Outcome.not_verified: EXIT_NOT_VERIFIED,
    Outcome.schema: EXIT_SCHEMA,
}
LOG_WIDTH = 160

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


@contextmanager
def _job_errors() -> Iterator[None]:
    """A job that did not run to its end: its sentence, and the exit code a scheduler acts on."""
    try:
        yield
    except JobError as error:
        raise fail(str(error), EXIT_CODES[error.outcome]) from None


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
    spark = SparkOptions(master, tuple(conf or ()), partitions)
    with _job_errors():
        moment = parsed(as_of, parse_moment) if as_of else None
        with_spark = jobs.report_uses_spark(engine, spark)
        require_extra()
        result = jobs.report(
            read_database(ctx, current_database(ctx)),
            output=output,
            archive_dir=archive_dir,
            as_of=moment,
            state_dir=state_dir,
            full=full,
            with_spark=with_spark,
            spark=spark,
            progress=err_console,
        )
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
    archive_dir: Path | None = typer.Option(
        None,
        "--archive-dir",
        help="Parquet archive (default: the archive_dir setting, else ./archive).",
    ),
    batch_size: int = typer.Option(
        10_000, "--batch-size", min=1, help="Messages deleted per database transaction."
    ),
    master: str | None = MASTER_OPTION,
    conf: list[str] | None = CONF_OPTION,
    partitions: int | None = PARTITIONS_OPTION,
) -> None:
    """Copy resolved messages and their history to Parquet, verify, delete from PostgreSQL."""
    with _job_errors():
        age = parsed(older_than, parse_duration)
        if age <= timedelta(0):
            raise fail("--older-than must be positive", EXIT_USAGE)
        require_extra()
        # The directory `serve` is told about (archive first) unless given here.
        archive_dir = archive_dir or settings_from(ctx).archive_dir or Path("archive")
        runs = jobs.archive(
            current_database(ctx),
            archive_dir=archive_dir,
            older_than=age,
            batch_size=batch_size,
            spark=SparkOptions(master, tuple(conf or ()), partitions),
            progress=err_console,
        )
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
    with _job_errors():
        threshold = parsed(pending_longer_than, parse_duration)
        moment = parsed(as_of, parse_moment) if as_of else None
        parsed(match_on, parse_match_on)
        require_extra()
        url = current_database(ctx)
        # Unless given, the producer's table is in this database, the application's
        # own part of it (public, or its login role's search_path): not our schema.
        producer_url = producer_url_of(producer_database_url, default=out_of_schema(url))
        request = jobs.AuditRequest(
            producer_url=producer_url,
            table=table,
            key=key,
            committed_when=committed_when,
            match_on=match_on,
            producer_groups=tuple(producer_group or ()),
            pending_longer_than=threshold,
            archive_dir=archive_dir,
            output=output,
            as_of=moment,
        )
        spark = SparkOptions(master, tuple(conf or ()), partitions)
        # The messages from the read database; the producer's table, by default, from
        # the coordinator's own, which is never behind it.
        result = jobs.audit(read_database(ctx, url), request, spark=spark, progress=err_console)

    columns: tuple[str, ...] = (
        "kind",
        "message_offset",
        "transaction_id",
        "producer_group",
        "topic",
        "state",
    )
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
