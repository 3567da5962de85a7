"""`coordinator subscriptions`, `coordinator dlq ...` and lag in `coordinator status`."""

from __future__ import annotations

import asyncio

import pytest
from typer.testing import CliRunner

from coordinator.cli import app
from coordinator.core import Coordinator
from coordinator.domain.delivery import DeadLetter
from tests.factories import TOPIC, half

runner = CliRunner()
CONSUMERS = "billing"


def invoke(database_url: str, *args: str):
    # Wide enough that rich does not fold 32-character message ids.
    return runner.invoke(
        app,
        ["--database-url", database_url, *args],
        catch_exceptions=False,
        env={"COLUMNS": "200"},
    )


@pytest.fixture
def dead_letters(database_url: str) -> list[DeadLetter]:
    """Two dead letters of `billing` on orders, one on payments; one message pending."""

    async def seed() -> list[DeadLetter]:
        async with Coordinator.connect(database_url) as core:
            for topic in (TOPIC, "payments"):
                await core.delivery.subscribe(CONSUMERS, topic, "created", max_delivery_attempts=1)
            await core.transactions.send_batch(
                [
                    half(body=b"poison 1", tags="created"),
                    half(body=b"poison 2", tags="created"),
                    half(body=b"poison 3", tags="created", topic="payments"),
                ]
            )
            await core.delivery.receive(CONSUMERS, max_messages=10, invisible_seconds=0.05)
            await asyncio.sleep(0.1)
            assert await core.delivery.receive(CONSUMERS) == []
            await core.transactions.send(half(body=b"pending", tags="created"))
            return await core.delivery.dead_letters(CONSUMERS)

    return asyncio.run(seed())


def test_subscriptions_lists_each_with_its_lag(
    database_url: str, dead_letters: list[DeadLetter]
) -> None:
    result = invoke(database_url, "subscriptions")
    assert result.exit_code == 0, result.output
    assert CONSUMERS in result.output and "payments" in result.output
    assert "created" in result.output
    empty = invoke(database_url, "subscriptions", "--group", "nobody")
    assert empty.exit_code == 0 and "No subscriptions." in empty.output


def test_dlq_list(database_url: str, dead_letters: list[DeadLetter]) -> None:
    result = invoke(database_url, "dlq", "list")
    assert result.exit_code == 0, result.output
    for letter in dead_letters:
        assert letter.message_id in result.output
    assert "poison 1" in result.output
    only = invoke(database_url, "dlq", "list", "--group", CONSUMERS, "--topic", "payments")
    assert "poison 3" in only.output and "poison 1" not in only.output
    none = invoke(database_url, "dlq", "list", "--group", "nobody")
    assert none.exit_code == 0 and "No dead letters." in none.output


def test_dlq_requeue_one_then_the_rest(database_url: str, dead_letters: list[DeadLetter]) -> None:
    first = dead_letters[0]
    one = invoke(database_url, "dlq", "requeue", str(first.id))
    assert one.exit_code == 0 and "requeued 1 dead letter" in one.output
    again = invoke(database_url, "dlq", "requeue", str(first.id))
    assert again.exit_code == 3 and f"no dead letter {first.id}" in again.output

    payments = invoke(
        database_url, "dlq", "requeue", "--group", CONSUMERS, "--all", "-t", "payments"
    )
    assert payments.exit_code == 0 and "requeued 1 dead letter" in payments.output
    rest = invoke(database_url, "dlq", "requeue", "--group", CONSUMERS, "--all")
    assert rest.exit_code == 0 and "requeued 1 dead letter" in rest.output
    assert "No dead letters." in invoke(database_url, "dlq", "list").output


@pytest.mark.parametrize(
    "args",
    [
        ("dlq", "requeue"),
        ("dlq", "requeue", "--all"),
        ("dlq", "requeue", "1", "--all", "--group", CONSUMERS),
        ("dlq", "requeue", "1", "--topic", TOPIC),
    ],
)
def test_dlq_requeue_needs_an_id_or_a_group_with_all(database_url: str, args: tuple) -> None:
    result = invoke(database_url, *args)
    assert result.exit_code == 2


def test_bad_names_are_refused(database_url: str) -> None:
    result = invoke(database_url, "dlq", "list", "--group", "no spaces")
    assert result.exit_code == 4 and "consumer group" in result.output


def test_status_shows_consumer_lag(database_url: str, dead_letters: list[DeadLetter]) -> None:
    result = invoke(database_url, "status")
    assert result.exit_code == 0, result.output
    assert "Consumer groups" in result.output and CONSUMERS in result.output
