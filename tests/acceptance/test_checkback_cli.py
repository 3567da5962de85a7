"""`coordinator tx recheck|commit|rollback` and `coordinator producers` against a real database."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from typer.testing import CliRunner

from coordinator.cli import app
from coordinator.core import Coordinator
from coordinator.domain.messages import SendResult
from tests.factories import GROUP, half

runner = CliRunner()


class Outcome:
    """A CLI run with its output on one line (terminal wrapping undone)."""

    def __init__(self, database_url: str, args: tuple[str, ...]) -> None:
        result = runner.invoke(app, ["--database-url", database_url, *args], catch_exceptions=False)
        self.exit_code = result.exit_code
        self.output = " ".join(result.output.split())


def invoke(database_url: str, *args: str) -> Outcome:
    return Outcome(database_url, args)


@pytest.fixture
def discarded(database_url: str, db: psycopg.Connection) -> SendResult:
    async def seed() -> SendResult:
        async with Coordinator.connect(database_url) as core:
            return await core.transactions.prepare(half())

    sent = asyncio.run(seed())
    # as the engine leaves a message that used its check budget
    db.execute(
        "UPDATE messages SET state = 'discarded', resolved_at = now(), "
        "resolution_source = 'discard', next_check_at = NULL, check_count = 15 WHERE id = %s",
        (sent.offset,),
    )
    return sent


def _state(db: psycopg.Connection, offset: int) -> tuple:
    return db.execute(
        "SELECT state, resolution_source, check_count FROM messages WHERE id = %s", (offset,)
    ).fetchone()


def test_tx_recheck_re_arms_a_discarded_message(
    database_url: str, db: psycopg.Connection, discarded: SendResult
) -> None:
    result = invoke(database_url, "tx", "recheck", discarded.transaction_id)
    assert result.exit_code == 0, result.output
    assert f"transaction {discarded.transaction_id} (offset {discarded.offset}) re-armed" in (
        result.output
    )
    assert _state(db, discarded.offset) == ("prepared", None, 0)

    again = invoke(database_url, "tx", "recheck", str(discarded.offset))
    assert again.exit_code == 4
    assert "is prepared; only a discarded message can be re-armed" in again.output


def test_tx_commit_and_rollback_resolve_by_hand(
    database_url: str, db: psycopg.Connection, discarded: SendResult
) -> None:
    committed = invoke(database_url, "tx", "commit", discarded.message_id)
    assert committed.exit_code == 0, committed.output
    assert "committed by the operator (was discarded)" in committed.output
    assert _state(db, discarded.offset)[:2] == ("committed", "operator")

    repeat = invoke(database_url, "tx", "commit", discarded.transaction_id)
    assert repeat.exit_code == 0 and "is already committed; nothing changed" in repeat.output

    refused = invoke(database_url, "tx", "rollback", discarded.transaction_id)
    assert refused.exit_code == 4
    assert "is already committed; it cannot be rolled back" in refused.output
    assert _state(db, discarded.offset)[0] == "committed"


def test_operator_commands_on_an_unknown_id_exit_3(database_url: str) -> None:
    for command in ("recheck", "commit", "rollback"):
        result = invoke(database_url, "tx", command, "nothing-like-this")
        assert result.exit_code == 3
        assert "no message with offset, transaction id or message id" in result.output


def test_producers_lists_the_registry(database_url: str, db: psycopg.Connection) -> None:
    empty = invoke(database_url, "producers")
    assert empty.exit_code == 0 and "No producer instances registered." in empty.output

    async def register() -> None:
        async with Coordinator.connect(database_url) as core:
            await core.checkback.producers.heartbeat(GROUP, "instance-1")
            await core.checkback.producers.heartbeat(
                GROUP, "instance-2", "http://10.0.0.7:9000/check"
            )
            await core.checkback.producers.heartbeat("payments", "gone")

    asyncio.run(register())
    db.execute(
        "UPDATE producers SET last_seen_at = now() - interval '5 minutes' "
        "WHERE instance_id = 'gone'"
    )
    listed = invoke(database_url, "producers")
    assert listed.exit_code == 0, listed.output
    for text in ("instance-1", "instance-2", "pull", "push", "payments", "2 of 3 instances live"):
        assert text in listed.output
    only = invoke(database_url, "producers", "--group", "payments")
    assert "gone" in only.output and "instance-1" not in only.output
    assert "0 of 1 instances live" in only.output
