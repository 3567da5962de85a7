"""The report's input read and reduced in the command's own process: no Spark, no JVM.

The same reads and the same reduction as the Spark job (spark.py),
with threads for Spark's tasks: PostgreSQL in ranges of the message offset,
each range through its own binary COPY into Arrow (columnar.py), the
archive's birth-date partitions through pyarrow's Parquet reader, every
batch reduced to partial figures (figures.reduce_rows) as it arrives. ADBC's
decoding and pyarrow's kernels release the GIL, so the threads run at once.

On one machine this is faster than starting Spark at every size the
benchmark measures (docs/pipeline.md#benchmark): Spark's fixed cost is ~15 s
per command, and the figures are reduced by the same code either way. What
Spark adds is executors on other machines.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from coordinator.db.queries import query
from coordinator.pipeline import columnar
from coordinator.pipeline.archive_layout import MESSAGES, PARTITION_COLUMNS, day_files
from coordinator.pipeline.figures import (
    FROM_ARCHIVE,
    INPUT_COLUMNS,
    compact,
    empty_partials,
    reduce_rows,
)
from coordinator.pipeline.pgtypes import arrow_schema, spark_schema
from coordinator.pipeline.report.input import BirthRanges, ReportInput
from coordinator.pipeline.source import ARROW, ColumnarPlan, QuerySlice, ReadSpec, plan_slices

# Rows per Arrow batch: large enough that reducing a batch costs little more
# than its rows, small enough that a slice holds a few MB at a time.
BATCH_ROWS = 100_000
_HIVE = ds.partitioning(
    pa.schema([(name, pa.string()) for name in PARTITION_COLUMNS]), flavor="hive"
)
_ARCHIVE_COLUMNS = ["id", *INPUT_COLUMNS]

Progress = Callable[[int, int], None]  # (slices done, slices in all)


def _reduced(batches: Iterable[pa.RecordBatch], from_archive: bool) -> pa.Table:
    parts = []
    for batch in batches:
        if batch.num_rows:
            rows = pa.Table.from_batches([batch]).select(list(INPUT_COLUMNS))
            flags = pa.array(np.full(batch.num_rows, from_archive), pa.bool_())
            parts.append(reduce_rows(rows.append_column(FROM_ARCHIVE, flags)))
    return compact(pa.concat_tables(parts)) if parts else empty_partials()


class _LiveRead:
    """PostgreSQL's rows of the input, one offset range per task."""

    def __init__(self, source: ReportInput, partitions: int, keep_ids: bool) -> None:
        self.spec = ReadSpec(
            url=source.url,
            query=query(source.query_name),
            params=source.params,
            partition_column="id",
            hash_partition_column=None,
            num_partitions=partitions,
            lower_bound=None,
            upper_bound=None,
            fetch_size=BATCH_ROWS,
            reader=ARROW,
        )
        self.plan = ColumnarPlan.of(self.spec)
        self.target = arrow_schema(spark_schema(self.plan.columns))
        self.keep_ids = keep_ids
        self.ids: list[pa.Array] = []
        self._lock = threading.Lock()

    def slices(self) -> list[QuerySlice]:
        return plan_slices(self.spec)

    def _batches(self, part: QuerySlice) -> Iterator[pa.RecordBatch]:
        statement = columnar.select_statement(self.plan.query, self.plan.columns, part.condition)
        for batch in columnar.read_batches(self.spec.url, statement, self.target, BATCH_ROWS):
            if self.keep_ids:
                with self._lock:
                    self.ids.append(batch.column("id"))
            yield batch

    def reduce(self, part: QuerySlice) -> pa.Table:
        return _reduced(self._batches(part), from_archive=False)


def _born_in(ranges: BirthRanges) -> ds.Expression:
    condition = ds.scalar(False)
    for start, end in ranges:
        within = ds.field("born_at") >= pa.scalar(start, pa.timestamp("us", tz="UTC"))
        if end is not None:
            within &= ds.field("born_at") < pa.scalar(end, pa.timestamp("us", tz="UTC"))
        condition |= within
    return condition


def _reduced_files(source: ReportInput, files: list[Path]) -> pa.Table:
    return _reduced(_archived(source, files), from_archive=True)


def _archived(source: ReportInput, files: list[Path]) -> Iterator[pa.RecordBatch]:
    """The transactional messages of these archive files born in the input's ranges."""
    if not files or source.archive_dir is None:
        return
    dataset = ds.dataset(
        [str(path) for path in files],
        format="parquet",
        partitioning=_HIVE,
        partition_base_dir=str(source.archive_dir / MESSAGES),
    )
    wanted = ds.field("kind") == "transactional"
    if source.born_in is not None:
        wanted &= _born_in(source.born_in)
    yield from dataset.to_batches(
        columns=_ARCHIVE_COLUMNS, filter=wanted, batch_size=BATCH_ROWS, use_threads=False
    )


def _not_live(batches: Iterable[pa.RecordBatch], live_ids: pa.Array) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield batch.filter(pc.invert(pc.is_in(batch.column("id"), value_set=live_ids)))


def read_partials(source: ReportInput, partitions: int, progress: Progress) -> pa.Table:
    """The input's partial figures, one row per key (as spark.read_partials)."""
    root = source.archive_dir
    files = day_files(root, MESSAGES, source.archive_days) if root is not None else []
    maybe_live = [path for path in files if source.overlaps(str(path))]
    settled = [path for path in files if not source.overlaps(str(path))]
    live = _LiveRead(source, partitions, keep_ids=bool(maybe_live))
    tasks: list[Callable[[], pa.Table]] = [
        functools.partial(live.reduce, part) for part in live.slices()
    ]
    # The archive's files, dealt out over as many tasks as there are threads.
    threads = max(1, partitions)
    for share in (settled[k::threads] for k in range(threads)):
        if share:
            tasks.append(functools.partial(_reduced_files, source, share))
    done = 0
    total = len(tasks) + (1 if maybe_live else 0)
    progress(done, total)
    results: list[pa.Table] = []
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for result in pool.map(lambda task: task(), tasks):
            results.append(result)
            done += 1
            progress(done, total)
    if maybe_live:
        # Only now are all live offsets known: a message in PostgreSQL and in
        # a file of an unfinished archive run is counted as the live row.
        live_ids = pa.concat_arrays(live.ids) if live.ids else pa.array([], pa.int64())
        results.append(
            _reduced(_not_live(_archived(source, maybe_live), live_ids), from_archive=True)
        )
        progress(total, total)
    return compact(pa.concat_tables(results))
