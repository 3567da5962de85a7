"""The database a benchmark run measures: a fresh embedded server, or yours."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, quote, urlparse, urlsplit

from coordinator.config import DEFAULT_DATABASE_SCHEMA
from coordinator.db import migrate
from coordinator.db.embedded import start_embedded
from coordinator.db.urls import in_schema


@dataclass(frozen=True)
class BenchDatabase:
    url: str
    embedded: bool

    @property
    def socket_dir(self) -> str | None:
        return parse_qs(urlparse(self.url).query).get("host", [None])[0]


@contextmanager
def bench_database(url: str | None) -> Iterator[BenchDatabase]:
    # The benchmarks' own sessions read the coordinator's tables by plain names.
    if url:
        migrate.upgrade(url)
        yield BenchDatabase(in_schema(url, DEFAULT_DATABASE_SCHEMA), embedded=False)
        return
    data_dir = Path(tempfile.mkdtemp(prefix="coordinator-bench-"))
    try:
        embedded_url = start_embedded(data_dir, database="bench")
        try:
            migrate.upgrade(embedded_url)
            yield BenchDatabase(in_schema(embedded_url, DEFAULT_DATABASE_SCHEMA), embedded=True)
        finally:
            _stop_embedded(data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def _stop_embedded(data_dir: Path) -> None:
    """Stop the embedded server before its directory goes: pgserver would stop it only at
    this process's exit, with pg_ctl, which finds no cluster in a removed directory and
    leaves the server running."""
    import pgserver

    pgserver.get_server(data_dir / "pgdata").cleanup()


def pgbench_binary() -> str:
    """pgbench from the pgserver package (same major version as the embedded server)."""
    import pgserver

    bundled = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pgbench"
    if bundled.exists():
        return str(bundled)
    found = shutil.which("pgbench")
    if found is None:
        raise RuntimeError("pgbench not found (neither in pgserver nor on PATH)")
    return found


def on_database(url: str, name: str) -> str:
    """`url` with another database name, the rest (the schema's `options` too) as it was.

    Not SQLAlchemy's URL rendering: it writes a space in a query value as `+`,
    which libpq reads as a plus sign.
    """
    return urlsplit(url)._replace(path="/" + quote(name, safe="")).geturl()
