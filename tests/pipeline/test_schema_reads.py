"""The pipeline reads the coordinator's schema on a database with no search_path default,
beside an application whose own tables (a `messages`, its barrier) are in public."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from coordinator.cli import app
from coordinator.core import Coordinator
from coordinator.db import migrate
from coordinator.domain.states import Resolution
from tests.factories import end, half

pytestmark = pytest.mark.slow

runner = CliRunner()


async def _committed(url: str) -> str:
    async with Coordinator.connect(url) as core:
        sent = await core.transactions.prepare(half())
        await core.transactions.end(end(sent.transaction_id, Resolution.COMMIT))
        return sent.transaction_id


def test_report_and_audit_read_the_schema_and_the_applications_barrier_in_public(
    empty_database: str, tmp_path: Path
) -> None:
    url = empty_database
    migrate.upgrade(url)
    transaction_id = asyncio.run(_committed(url))
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE messages (id int PRIMARY KEY)")  # the application's
        conn.execute(
            "CREATE TABLE coordinator_barrier (transaction_id text PRIMARY KEY, "
            "outcome text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"
        )
        conn.execute("INSERT INTO coordinator_barrier VALUES (%s, 'committed')", [transaction_id])

    base = ["--database-url", url, "pipeline"]
    report = runner.invoke(app, [*base, "report", "-o", str(tmp_path / "report")])
    assert report.exit_code == 0, report.output
    assert "1 half message" in report.output
    audit = runner.invoke(app, [*base, "audit", "-o", str(tmp_path / "audit")])
    assert audit.exit_code == 0, audit.output
