"""`coordinator pipeline archive`: resolved messages and history to Parquet, out of PostgreSQL.

A run goes through these steps, recorded in its manifest (manifest.py):

1. plan: freeze the cutoff (now - older_than, by the database clock) and the
   newest offset; the run considers nothing outside these bounds.
2. copy: Spark reads the archivable messages (resolved before the cutoff,
   with no delivery row and no dead letter left) and their history, in
   parallel id ranges, into a staging directory of the run (overwritten when
   the step is repeated).
3. verify: per birth date and topic, the rows and a checksum of every column
   of the staged Parquet must equal the same figures computed by PostgreSQL.
   A mismatch sends the run back to copy and fails the job (exit 7).
4. publish: each staged file is renamed into the archive, prefixed with the
   run id. A rename is atomic; a file already moved is skipped on rerun.
5. delete: the offsets found in the run's published files are deleted from
   PostgreSQL in batches (history goes with them, by the messages_deleted trigger), each batch its
   own transaction, re-checking that the message is resolved and has nothing
   left to deliver.
6. finish: a message that could not be deleted (it got a delivery meanwhile)
   is taken out of the run's files again, so that it lives in exactly one
   place; the staging directory is removed.

A run that stopped anywhere (crash, kill, failed verification) is resumed
from its manifest by the next invocation before a new run starts; every step
is idempotent, so nothing is lost or duplicated. One run at a time per
database (an advisory lock).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from coordinator.db.queries import execute_sync
from coordinator.pipeline import manifest as manifests
from coordinator.pipeline.archive_layout import (
    HISTORY,
    MESSAGES,
    PARTITION_COLUMNS,
    run_file_prefix,
)
from coordinator.pipeline.checksums import PartitionKey, PartitionSum, partition_sums
from coordinator.pipeline.manifest import PartitionRecord, RunManifest, RunStatus
from coordinator.pipeline.progress import JobProgress, QuietProgress
from coordinator.pipeline.tables import read_named, read_parquet_dataset

Checkpoint = Callable[[str], None]

# Where a run calls its checkpoint hook: after each effect, before the
# manifest records it. Tests raise there to simulate a crash at that point.
CHECKPOINTS = (
    "planned",
    "copied-messages",
    "copied",
    "verified",
    "published-file",
    "published",
    "deleted-batch",
    "deleted",
    "finished-file",
    "finished",
)


class ArchiveError(Exception):
    """The archive job could not finish; rerunning it resumes safely."""


class ArchiveBusy(ArchiveError):
    pass


class ArchiveNotVerified(ArchiveError):
    def __init__(self, run_id: str, differences: list[str]) -> None:
        self.differences = differences
        shown = "; ".join(differences[:5]) + (" ..." if len(differences) > 5 else "")
        super().__init__(
            f"archive run {run_id}: the Parquet copy does not match PostgreSQL ({shown}); "
            "nothing was deleted, the next run copies again"
        )


@dataclass(frozen=True)
class ArchiveOptions:
    archive_dir: Path
    older_than: timedelta
    batch_size: int = 10_000
    partitions: int = 4


def _chunks(values: list[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _published_path(archive: Path, relative: str, run_id: str) -> Path:
    staged = Path(relative)
    return archive / staged.parent / f"{run_file_prefix(run_id)}{staged.name}"


def _write_partitioned(rows: DataFrame, path: Path) -> None:
    # One file per date and topic (a shuffle on the partition columns), rows
    # in offset order: small, predictable files.
    (
        rows.repartition(*PARTITION_COLUMNS)
        .sortWithinPartitions(*PARTITION_COLUMNS, "id")
        .write.mode("overwrite")
        .partitionBy(*PARTITION_COLUMNS)
        .parquet(str(path))
    )


def _staged_files(staging: Path) -> list[str]:
    found = []
    for table in (MESSAGES, HISTORY):
        for path in (staging / table).rglob("*.parquet"):
            relative = path.relative_to(staging)
            if not any(part.startswith((".", "_")) for part in relative.parts):
                found.append(relative.as_posix())
    return sorted(found)


class ArchiveRun:
    def __init__(
        self,
        spark: SparkSession,
        database_url: str,
        options: ArchiveOptions,
        manifest: RunManifest,
        progress: JobProgress,
        checkpoint: Checkpoint,
    ) -> None:
        self.spark = spark
        self.url = database_url
        self.options = options
        self.archive = options.archive_dir
        self.manifest = manifest
        self.progress = progress
        self.checkpoint = checkpoint
        self.staging = manifests.staging_dir(self.archive, manifest.run_id)

    @property
    def params(self) -> dict[str, Any]:
        return {"cutoff": self.manifest.cutoff, "max_id": self.manifest.max_id}

    def _advance(self, status: RunStatus) -> None:
        self.manifest.status = status
        manifests.save(self.archive, self.manifest)

    def complete(self) -> RunManifest:
        steps = {
            RunStatus.PLANNED: self.copy,
            RunStatus.COPIED: self.verify,
            RunStatus.VERIFIED: self.publish,
            RunStatus.PUBLISHED: self.delete,
            RunStatus.DELETED: self.finish,
        }
        while self.manifest.status is not RunStatus.DONE:
            steps[self.manifest.status]()
        return self.manifest

    def copy(self) -> None:
        for table, name, column in (
            (MESSAGES, "pipeline_archive_messages", "id"),
            (HISTORY, "pipeline_archive_history", "message_offset"),
        ):
            with self.progress.step(f"copying {table} to staging Parquet"):
                rows = read_named(
                    self.spark,
                    self.url,
                    name,
                    params=self.params,
                    partition_column=column,
                    partitions=self.options.partitions,
                )
                _write_partitioned(rows, self.staging / table)
            self.checkpoint("copied-messages" if table == MESSAGES else "copied")
        self._advance(RunStatus.COPIED)

    def _postgres_sums(self, name: str) -> dict[PartitionKey, PartitionSum]:
        with psycopg.connect(self.url) as conn:
            rows = execute_sync(conn, name, self.params).fetchall()
        return {
            PartitionKey(born_date, topic): PartitionSum(int(count), int(checksum))
            for born_date, topic, count, checksum in rows
        }

    def verify(self) -> None:
        with self.progress.step("verifying the copy (rows and checksum per partition)"):
            parquet = {
                table: partition_sums(read_parquet_dataset(self.spark, self.staging, table), table)
                for table in (MESSAGES, HISTORY)
            }
            postgres = {
                MESSAGES: self._postgres_sums("pipeline_archive_message_checksums"),
                HISTORY: self._postgres_sums("pipeline_archive_history_checksums"),
            }
        differences = [
            f"{table} {key.label()}: Parquet {parquet[table].get(key)}, "
            f"PostgreSQL {postgres[table].get(key)}"
            for table in (MESSAGES, HISTORY)
            for key in sorted(parquet[table].keys() | postgres[table].keys())
            if parquet[table].get(key) != postgres[table].get(key)
        ]
        if differences:
            self._advance(RunStatus.PLANNED)
            raise ArchiveNotVerified(self.manifest.run_id, differences)
        empty = PartitionSum(0, 0)
        self.manifest.partitions = [
            PartitionRecord(
                born_date=key.born_date.isoformat(),
                topic=key.topic,
                messages=parquet[MESSAGES].get(key, empty).rows,
                messages_checksum=str(parquet[MESSAGES].get(key, empty).checksum),
                history=parquet[HISTORY].get(key, empty).rows,
                history_checksum=str(parquet[HISTORY].get(key, empty).checksum),
            )
            for key in sorted(parquet[MESSAGES].keys() | parquet[HISTORY].keys())
        ]
        self.manifest.files = _staged_files(self.staging)
        self.checkpoint("verified")
        self._advance(RunStatus.VERIFIED)

    def publish(self) -> None:
        with self.progress.step(f"publishing {len(self.manifest.files)} Parquet files"):
            for relative in self.manifest.files:
                source = self.staging / relative
                target = _published_path(self.archive, relative, self.manifest.run_id)
                if source.exists():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(source, target)
                elif not target.exists():
                    raise ArchiveError(
                        f"archive run {self.manifest.run_id}: {relative} is neither staged "
                        "nor published; restore it or delete the run's manifest and files"
                    )
                self.checkpoint("published-file")
        self.checkpoint("published")
        self._advance(RunStatus.PUBLISHED)

    def _published(self, table: str) -> list[Path]:
        return [
            _published_path(self.archive, relative, self.manifest.run_id)
            for relative in self.manifest.files
            if relative.startswith(f"{table}/")
        ]

    def archived_ids(self) -> list[int]:
        """Offsets present in the run's published message files."""
        ids: list[int] = []
        for path in self._published(MESSAGES):
            ids.extend(pq.read_table(path, columns=["id"]).column("id").to_pylist())
        return sorted(ids)

    def delete(self) -> None:
        ids = self.archived_ids()
        with (
            self.progress.step(f"deleting {len(ids):,} archived messages from PostgreSQL"),
            psycopg.connect(self.url, autocommit=True) as conn,
        ):
            for batch in _chunks(ids, self.options.batch_size):
                with conn.transaction():
                    execute_sync(conn, "pipeline_archive_delete", {"ids": batch})
                self.checkpoint("deleted-batch")
        self.checkpoint("deleted")
        self._advance(RunStatus.DELETED)

    def _still_present(self, ids: list[int]) -> set[int]:
        present: set[int] = set()
        with psycopg.connect(self.url, autocommit=True) as conn:
            for batch in _chunks(ids, self.options.batch_size):
                rows = execute_sync(conn, "pipeline_archive_still_present", {"ids": batch})
                present.update(row[0] for row in rows)
        return present

    def _drop_rows(self, paths: Iterable[Path], column: str, ids: set[int]) -> None:
        drop = list(ids)
        for path in paths:
            table = pq.read_table(path)
            keep = pc.invert(pc.is_in(table.column(column), value_set=pc.cast(drop, "int64")))
            kept = table.filter(keep)
            if kept.num_rows != table.num_rows:
                temporary = path.with_name(path.name + ".tmp")
                pq.write_table(kept, temporary, coerce_timestamps="us")
                os.replace(temporary, path)
            self.checkpoint("finished-file")

    def finish(self) -> None:
        with self.progress.step("checking that every archived message left PostgreSQL"):
            ids = self.archived_ids()
            kept = self._still_present(ids)
            if kept:
                # Archived but not deleted (a delivery appeared meanwhile): it
                # stays live, so it must not stay archived too.
                self._drop_rows(self._published(MESSAGES), "id", kept)
                self._drop_rows(self._published(HISTORY), "message_offset", kept)
        self.checkpoint("finished")
        self.manifest.kept = sorted(kept)
        self.manifest.deleted = len(ids) - len(kept)
        self.manifest.finished_at = datetime.now(UTC).isoformat()
        self._advance(RunStatus.DONE)
        shutil.rmtree(self.staging, ignore_errors=True)


def _plan(database_url: str, options: ArchiveOptions) -> RunManifest:
    with psycopg.connect(database_url) as conn:
        plan = execute_sync(
            conn,
            "pipeline_archive_plan",
            {"older_than_seconds": options.older_than.total_seconds()},
        ).fetchone()
    assert plan is not None  # an aggregate's one row
    cutoff, max_id = plan
    return RunManifest(
        run_id=RunManifest.new_run_id(),
        status=RunStatus.PLANNED,
        cutoff=cutoff.isoformat(),
        max_id=int(max_id),
        older_than_seconds=options.older_than.total_seconds(),
        created_at=datetime.now(UTC).isoformat(),
    )


def _no_checkpoint(name: str) -> None:
    pass


def run_archive(
    spark: SparkSession,
    database_url: str,
    options: ArchiveOptions,
    *,
    progress: JobProgress | None = None,
    checkpoint: Checkpoint = _no_checkpoint,
) -> list[RunManifest]:
    """Finish any interrupted run, then archive what is older than the cutoff now.

    Returns the manifests of the runs completed by this call (resumed ones first).
    """
    progress = progress or QuietProgress()
    options.archive_dir.mkdir(parents=True, exist_ok=True)
    with psycopg.connect(database_url, autocommit=True) as lock:
        locked = execute_sync(lock, "pipeline_archive_lock").fetchone()
        if not (locked and locked[0]):
            raise ArchiveBusy("another archive run holds this database's archive lock")
        try:
            completed = []
            for unfinished in manifests.unfinished_runs(options.archive_dir):
                progress.note(
                    f"resuming archive run {unfinished.run_id} from step "
                    f"'{unfinished.status}' (cutoff {unfinished.cutoff})"
                )
                run = ArchiveRun(spark, database_url, options, unfinished, progress, checkpoint)
                completed.append(run.complete())
            fresh = _plan(database_url, options)
            manifests.save(options.archive_dir, fresh)
            progress.note(f"archive run {fresh.run_id}: resolved before {fresh.cutoff}")
            checkpoint("planned")
            run = ArchiveRun(spark, database_url, options, fresh, progress, checkpoint)
            completed.append(run.complete())
            return completed
        finally:
            execute_sync(lock, "pipeline_archive_unlock")
