"""The `coordinator` command against a real database."""

from __future__ import annotations

import asyncio

import pytest
from typer.testing import CliRunner

from coordinator.cli import app
from coordinator.core import Coordinator
from coordinator.db import migrate
from coordinator.domain.messages import SendResult
from coordinator.domain.states import Resolution
from tests.factories import end, half

runner = CliRunner()


def invoke(database_url: str, *args: str):
    return runner.invoke(app, ["--database-url", database_url, *args], catch_exceptions=False)


@pytest.fixture
def committed(database_url: str) -> SendResult:
    """One committed and one pending transaction (the CLI runs its own event loop)."""

    async def seed() -> SendResult:
        async with Coordinator.connect(database_url) as core:
            sent = await core.prepare(half(tags="created", keys=("order-1001",)))
            await core.end(end(sent.transaction_id, Resolution.COMMIT))
            await core.prepare(half(topic="payments"))
            return sent

    return asyncio.run(seed())


def test_status_shows_counts_and_the_oldest_pending(
    database_url: str, committed: SendResult
) -> None:
    result = invoke(database_url, "status")
    assert result.exit_code == 0, result.output
    assert "committed" in result.output and "prepared" in result.output
    assert "payments" in result.output and "order-producers" in result.output
    assert "1 pending; oldest: transaction" in result.output


def test_tx_show_finds_a_message_by_any_id(database_url: str, committed: SendResult) -> None:
    for ident in (committed.transaction_id, committed.message_id, str(committed.offset)):
        result = invoke(database_url, "tx", "show", ident)
        assert result.exit_code == 0, result.output
        assert committed.message_id in result.output
        assert "order 1001 created" in result.output
        assert "prepared" in result.output and "committed" in result.output  # history rows


def test_tx_show_of_an_unknown_id_exits_3_with_a_sentence(database_url: str) -> None:
    result = invoke(database_url, "tx", "show", "nothing-like-this")
    assert result.exit_code == 3
    assert "no message with offset, transaction id or message id 'nothing-like-this'" in (
        result.output
    )


def test_db_commands_migrate_down_and_up(database_url: str) -> None:
    heads = ", ".join(migrate.head_revisions())
    current = invoke(database_url, "db", "current")
    assert current.exit_code == 0 and f"current:  {heads}" in current.output

    down = invoke(database_url, "db", "downgrade", "base")
    assert down.exit_code == 0 and "revision base" in down.output
    assert "not up to date" in invoke(database_url, "db", "current").output

    up = invoke(database_url, "db", "upgrade")
    assert up.exit_code == 0 and f"revision {heads}" in up.output
    assert invoke(database_url, "status").exit_code == 0


def test_a_bad_flag_is_a_usage_error(database_url: str) -> None:
    result = runner.invoke(app, ["serve", "--port", "not-a-port"])
    assert result.exit_code == 2


@pytest.mark.parametrize(
    ("flags", "sentence"),
    [
        (["--check-max", "0"], "--check-max=0: input should be greater than or equal to 1"),
        (["--port", "70000"], "--port=70000: input should be less than or equal to 65535"),
        (["--transaction-timeout", "0"], "--transaction-timeout=0.0: input should be greater"),
    ],
)
def test_a_flag_out_of_range_is_a_usage_error(flags: list[str], sentence: str) -> None:
    result = runner.invoke(app, ["serve", *flags], catch_exceptions=False)
    assert result.exit_code == 2
    assert sentence in result.output
    assert "Traceback" not in result.output


def test_a_wrong_setting_in_the_environment_is_a_sentence() -> None:
    result = runner.invoke(
        app, ["status"], env={"COORDINATOR_CHECK_MAX": "0"}, catch_exceptions=False
    )
    assert result.exit_code == 2
    assert "COORDINATOR_CHECK_MAX='0': input should be greater than or equal to 1" in (
        result.output
    )


def test_an_unreachable_database_exits_5_with_a_sentence() -> None:
    url = "postgresql://nobody@/nowhere?host=/nonexistent"
    result = runner.invoke(app, ["--database-url", url, "status"], catch_exceptions=False)
    assert result.exit_code == 5
    assert "cannot reach the database" in result.output


def test_serve_on_an_unreachable_database_exits_5_with_a_sentence() -> None:
    url = "postgresql://nobody@127.0.0.1:1/nowhere"
    result = runner.invoke(app, ["--database-url", url, "serve"], catch_exceptions=False)
    assert result.exit_code == 5
    assert "cannot reach the database" in result.output
    assert "Traceback" not in result.output
