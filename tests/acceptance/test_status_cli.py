"""`coordinator status`: the overview once, as JSON, and live (--watch), ended by Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from coordinator.cli import app
from coordinator.cli.formats import size
from coordinator.cli.status_storage import NO_ROUND
from coordinator.core import Coordinator
from coordinator.domain.states import Resolution
from tests.factories import end
from tests.overview_data import (
    BILLING,
    ORDER_SVC,
    PAYMENT_SVC,
    STORED_TABLES,
    age_for_retention,
    expected_figures,
    expected_storage,
    overview_settings,
    seed,
)
from tests.processes import clean_environment, exited_within, stop_group

runner = CliRunner()
WIDE = {"COLUMNS": "160"}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
WAIT_SECONDS = 60.0


@pytest.fixture
def seeded(database_url: str, db: psycopg.Connection) -> None:
    async def run() -> None:
        async with Coordinator.connect(database_url, overview_settings()) as core:
            await seed(core, db)

    asyncio.run(run())


def invoke(database_url: str, *args: str):
    return runner.invoke(
        app, ["--database-url", database_url, *args], env=WIDE, catch_exceptions=False
    )


def _commit_oldest(database_url: str) -> str:
    async def run() -> str:
        async with Coordinator.connect(database_url, overview_settings()) as core:
            oldest = (await core.overview.read(minutes=1)).oldest[0]
            await core.transactions.end(
                end(oldest.transaction_id, Resolution.COMMIT, group=ORDER_SVC)
            )
            return oldest.transaction_id

    return asyncio.run(run())


def test_status_shows_the_figures_of_the_database(
    database_url: str, seeded: None, db: psycopg.Connection
) -> None:
    result = invoke(database_url, "status")
    assert result.exit_code == 0, result.output
    expected = expected_figures(db)
    out = result.output
    assert f"{expected['pending']} pending; oldest: transaction " in out
    assert expected["oldest_transaction_id"] in out  # whole, never cut
    assert re.search(r"committed\s+\S*\s+3\s", out)  # 3 in the window
    assert re.search(rf"{BILLING}\s+orders\s+2\s+1\s+1\s", out)  # lag, in flight, dead letters
    assert re.search(rf"{PAYMENT_SVC}\s+2\s", out)  # pending of a group without producers
    assert re.search(r">= 2 h\s+█+\s+1\n", out)


def test_status_json_is_the_overview_endpoints_answer(
    database_url: str, seeded: None, db: psycopg.Connection
) -> None:
    result = invoke(database_url, "status", "--json", "--minutes", "5")
    assert result.exit_code == 0, result.output
    seen = json.loads(result.output)
    expected = expected_figures(db)
    assert seen["pending"] == expected["pending"]
    assert [b["messages"] for b in seen["age_buckets"]] == expected["by_bucket"]
    assert len(seen["minutes"]) == 5
    assert seen["consumers"][0]["lag"] == expected["lag"]
    assert seen["oldest"][0]["transaction_id"] == expected["oldest_transaction_id"]


def test_status_shows_the_storage_and_says_it_runs_no_retention_round(
    database_url: str, seeded: None, db: psycopg.Connection
) -> None:
    age_for_retention(db)  # billing idle for 2 hours, its tables analyzed
    env = {**WIDE, "COORDINATOR_IDLE_CONSUMER_GROUP_HOURS": "1"}
    shown, as_json = (
        runner.invoke(
            app, ["--database-url", database_url, "status", *extra], env=env, catch_exceptions=False
        )
        for extra in ([], ["--json"])
    )
    expected = expected_storage(db)
    assert shown.exit_code == 0, shown.output
    out = shown.output
    for table, figures in expected["tables"].items():
        rows = f"{figures['rows']:,}"
        assert re.search(rf"{table}\s+{re.escape(size(figures['bytes']))}\s+{rows}\s", out), table
    assert re.search(r"dead_letters\s+\S+ KiB\s+1\s+2h00m\d\ds\n", out)
    assert " ".join(NO_ROUND.split()) in " ".join(out.split())
    assert re.search(rf"{BILLING}\s+2h00m\d\ds ago\s+{expected['billing_pending']}\n", out)

    assert as_json.exit_code == 0, as_json.output
    storage = json.loads(as_json.output)["storage"]
    assert [t["table"] for t in storage["tables"]] == list(STORED_TABLES)
    assert {t["table"]: t["rows"] for t in storage["tables"]} == {
        table: figures["rows"] for table, figures in expected["tables"].items()
    }
    assert storage["last_round"] is None
    assert [g["consumer_group"] for g in storage["idle_consumer_groups"]] == [BILLING]


def test_watch_reads_again_every_interval(database_url: str, seeded: None) -> None:
    result = invoke(
        database_url, "status", "--watch", "--interval", "0.2", "--iterations", "2", "--json"
    )
    assert result.exit_code == 0, result.output
    reads = [json.loads(line) for line in result.output.splitlines()]
    assert len(reads) == 2 and reads[0]["at"] < reads[1]["at"]
    assert reads[1]["pending"] == 8

    shown = invoke(database_url, "status", "--watch", "--interval", "0.2", "--iterations", "2")
    assert shown.exit_code == 0, shown.output
    assert "8 pending; oldest: transaction" in shown.output
    assert "Ctrl-C to stop" in shown.output


@contextmanager
def _watching(database_url: str, out: Path, *options: str) -> Iterator[subprocess.Popen[bytes]]:
    """`coordinator status --watch` as its own process, as in a terminal; stopped at the end."""
    environment = clean_environment(
        {
            "COLUMNS": "160",
            "LINES": "80",
            # rich draws the live display as on a terminal, into the file
            "TTY_COMPATIBLE": "1",
            "TTY_INTERACTIVE": "1",
        }
    )
    with out.open("wb") as sink:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "coordinator",
                "--database-url",
                database_url,
                "status",
                "--watch",
                "--interval",
                "0.3",
                *options,
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=environment,
            start_new_session=True,
        )
        try:
            yield process
        finally:
            stop_group(process)


def _until(probe: Callable[[], bool], what: str, out: Path) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}; the output was:\n{_screen(out)[-3000:]}")
        time.sleep(0.1)


def _screen(out: Path) -> str:
    return ANSI.sub("", out.read_bytes().decode(errors="replace"))


def test_watch_follows_changes_and_ctrl_c_ends_it_with_0(
    database_url: str, seeded: None, tmp_path: Path
) -> None:
    out = tmp_path / "watch.out"
    with _watching(database_url, out) as process:
        _until(lambda: "8 pending; oldest" in _screen(out), "the figures were shown", out)
        committed = _commit_oldest(database_url)
        _until(lambda: "7 pending; oldest" in _screen(out), "the change was shown", out)
        os.kill(process.pid, signal.SIGINT)
        assert exited_within(process, WAIT_SECONDS)
        assert process.wait() == 0, _screen(out)[-3000:]
    screen = _screen(out)
    assert "Traceback" not in screen and "Aborted" not in screen
    # The last screen: the committed one is no longer pending, and counts among the commits.
    last = screen.rsplit("coordinator status", 1)[1]
    assert committed not in last
    assert re.search(r"committed\s+\S*\s+4\s", last)


def test_ctrl_c_during_a_read_lets_the_read_finish_then_ends_with_0(
    database_url: str, seeded: None, tmp_path: Path
) -> None:
    out = tmp_path / "watch.out"
    with _watching(database_url, out) as process, psycopg.connect(database_url) as blocker:
        _until(lambda: "8 pending; oldest" in _screen(out), "the figures were shown", out)
        # The next read waits for this lock: Ctrl-C arrives while it runs.
        blocker.execute("LOCK TABLE messages IN ACCESS EXCLUSIVE MODE")
        time.sleep(1.0)
        os.kill(process.pid, signal.SIGINT)
        assert not exited_within(process, 1.0)  # the read is not cancelled mid-query
        blocker.rollback()
        assert exited_within(process, WAIT_SECONDS)
        assert process.wait() == 0, _screen(out)[-3000:]
    screen = _screen(out)
    assert "Traceback" not in screen and "Aborted" not in screen
