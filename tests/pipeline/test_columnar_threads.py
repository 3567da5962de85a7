"""The columnar reader from many threads at once, as the report's in-process engine reads.

ADBC objects allow serialized access, never concurrent access, and
adbc-driver-postgresql's database counts its open connections in a plain
integer that opening and closing a connection change with the GIL released:
threads opening and closing connections of one shared database lost updates,
and a read failed with "[libpq] Open connection count underflowed" now and
then. The reader gives each database one connection at a time; these tests
hold it to that with the real driver on the real server, deterministically
(a race of a few instructions shows up only once in thousands of connections).
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import adbc_driver_manager
import pyarrow as pa
import pytest

from coordinator.pipeline import columnar

THREADS = 16
READS_PER_THREAD = 12
ROWS = 2_000
SCHEMA = pa.schema([("n", pa.int64())])
QUERY = f"SELECT g::int8 AS n FROM generate_series(1, {ROWS}) AS g"


class _Watch:
    """How many connections each ADBC database has open, and whether one ever had two."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: Counter[int] = Counter()
        self.most = 0

    def opened(self, database: Any) -> None:
        with self.lock:
            self.open[id(database)] += 1
            self.most = max(self.most, self.open[id(database)])

    def closed(self, database: Any) -> None:
        with self.lock:
            self.open[id(database)] -= 1


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> _Watch:
    """Every ADBC connection the reader opens, counted per database (the driver's own)."""
    seen = _Watch()
    driver_connection = adbc_driver_manager.AdbcConnection

    class WatchedConnection(driver_connection):  # type: ignore[misc, valid-type]
        def __init__(self, database: Any, **kwargs: Any) -> None:
            seen.opened(database)
            self.watched_database = database
            try:
                super().__init__(database, **kwargs)
            except BaseException:
                seen.closed(database)
                raise

        def close(self) -> None:
            try:
                super().close()
            finally:
                seen.closed(self.watched_database)

    monkeypatch.setattr(adbc_driver_manager, "AdbcConnection", WatchedConnection)
    return seen


def _read_in_threads(url: str) -> list[BaseException]:
    start = threading.Barrier(THREADS)
    failures: list[BaseException] = []

    def reads() -> None:
        start.wait()
        for _ in range(READS_PER_THREAD):
            try:
                batches = list(columnar.read_batches(url, QUERY, SCHEMA, 500))
                total = sum(pa.Table.from_batches(batches, SCHEMA).column("n").to_pylist())
                assert total == ROWS * (ROWS + 1) // 2
            except BaseException as failure:  # reported by the test, whatever it is
                failures.append(failure)

    threads = [threading.Thread(target=reads) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    return failures


def test_threads_reading_at_once_never_share_a_database(database_url: str, watch: _Watch) -> None:
    failures = _read_in_threads(database_url)
    assert failures == []
    # Connections of one database were never open at once, so never opened or
    # closed at once either: the driver's count cannot have lost an update.
    assert watch.most == 1
    assert all(count == 0 for count in watch.open.values())
    # And the driver agrees: it refuses to release a database whose count is
    # not zero ("Database released with N open connections").
    columnar.close_idle_databases()


def test_a_read_left_unfinished_gives_its_database_back_when_closed(
    database_url: str, watch: _Watch
) -> None:
    first = columnar.read_batches(database_url, QUERY, SCHEMA, 500)
    next(first)  # holds its connection
    second = list(columnar.read_batches(database_url, QUERY, SCHEMA, 500))
    assert sum(batch.num_rows for batch in second) == ROWS
    assert watch.most == 1  # the second read did not take the first one's database
    first.close()
    assert all(count == 0 for count in watch.open.values())
    columnar.close_idle_databases()
