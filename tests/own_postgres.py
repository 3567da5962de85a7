"""A PostgreSQL server of one test's own, which the test may stop and start.

Stopping the suite's shared server would break every other test, so a test
that takes Postgres away starts its own (pgserver, in a temporary directory)
and always stops it at the end, also when it fails.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import psutil
import psycopg
from psycopg import sql

from coordinator.db import migrate
from tests.conftest import url_for
from tests.search_path import give_test_search_path


class OwnPostgres:
    def __init__(self, server: object, data_dir: Path) -> None:
        self._server = server
        self.data_dir = data_dir
        uri = urlparse(server.get_uri())  # type: ignore[attr-defined]
        self.host = parse_qs(uri.query)["host"][0]
        self.user = uri.username or "postgres"

    def url(self, dbname: str = "postgres") -> str:
        return url_for(self.host, 5432, self.user, dbname)

    def migrated_database(self, dbname: str) -> str:
        """A new database at the head revision; its URL."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        url = self.url(dbname)
        migrate.upgrade(url)
        give_test_search_path(url)
        return url

    def stop(self, mode: str = "fast") -> None:
        """`pg_ctl stop -m MODE`: fast ends every session, immediate is a crash."""
        self._pg_ctl(["-w", "-m", mode, "stop"])

    def start(self) -> None:
        # pgserver starts it on the same socket directory as the first time.
        self._server.ensure_postgres_running()  # type: ignore[attr-defined]

    def _pg_ctl(self, args: list[str]) -> None:
        from pgserver._commands import pg_ctl

        pg_ctl(args, pgdata=self.data_dir / "pgdata", user=self._server.system_user, timeout=60)  # type: ignore[attr-defined]

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """Every process of the server stopped (SIGSTOP) for the block, as a hung
        machine: connections stay open, nothing answers. Thawed however the block ends."""
        postmaster = int((self.data_dir / "pgdata" / "postmaster.pid").read_text().split()[0])
        parent = psutil.Process(postmaster)
        processes = [parent, *parent.children(recursive=True)]
        for process in processes:
            process.suspend()
        try:
            yield
        finally:
            for process in processes:
                with suppress(psutil.NoSuchProcess):
                    process.resume()

    def close(self) -> None:
        # Stops the server if it runs (pgserver skips one that is stopped).
        self._server.cleanup()  # type: ignore[attr-defined]


@contextmanager
def own_postgres(prefix: str = "coordinator-test-own-pg-") -> Iterator[OwnPostgres]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

        data_dir = Path(tempfile.mkdtemp(prefix=prefix))
        server = pgserver.get_server(data_dir / "pgdata", cleanup_mode="stop")
    postgres = OwnPostgres(server, data_dir)
    try:
        yield postgres
    finally:
        try:
            postgres.close()
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)
