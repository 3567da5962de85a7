"""What the listing commands print: JSON for scripts, and tables whose ids survive 80 columns."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coordinator.cli import app
from coordinator.core import Coordinator
from coordinator.domain.access import Grants
from coordinator.domain.messages import SendResult
from coordinator.domain.states import Resolution
from tests.factories import end, half

runner = CliRunner()

# Long names, as real deployments have them: a table cut to 80 columns would
# shorten them (and the 32-character ids) first.
PRODUCERS = "order-service-producers-eu-west-1"
INSTANCE = "order-service-7f9c6d5b4-x2k8q:4f1e2d3c-9a8b"
CONSUMERS = "billing-service-consumers-eu-west-1"
TOKEN = "order-service-production-eu-west-1"


@dataclass(frozen=True)
class Seeded:
    sent: SendResult
    dead_message_ids: list[str]


@pytest.fixture
def seeded(database_url: str) -> Seeded:
    async def seed() -> Seeded:
        async with Coordinator.connect(database_url) as core:
            await core.checkback.producers.heartbeat(
                PRODUCERS, INSTANCE, "http://10.0.0.7:9000/check"
            )
            await core.delivery.subscribe(CONSUMERS, "orders", "created", max_delivery_attempts=1)
            sent = await core.transactions.prepare(half(producer_group=PRODUCERS, tags="created"))
            await core.transactions.end(
                end(sent.transaction_id, Resolution.COMMIT, group=PRODUCERS)
            )
            await core.delivery.receive(CONSUMERS, max_messages=10, invisible_seconds=0.05)
            await asyncio.sleep(0.1)
            assert await core.delivery.receive(CONSUMERS) == []
            await core.tokens.create(
                TOKEN, Grants(consume_groups=(CONSUMERS,), consume_topics=("orders",))
            )
            dead = await core.delivery.dead_letters(CONSUMERS)
            return Seeded(sent, [d.message_id for d in dead])

    return asyncio.run(seed())


def invoke(database_url: str, *args: str, columns: int = 80):
    return runner.invoke(
        app,
        ["--database-url", database_url, *args],
        catch_exceptions=False,
        env={"COLUMNS": str(columns)},
    )


def _iso(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_json_of_producers(database_url: str, seeded: Seeded) -> None:
    result = invoke(database_url, "producers", "--json")
    assert result.exit_code == 0, result.output
    (producer,) = json.loads(result.stdout)["producers"]
    assert producer["producer_group"] == PRODUCERS and producer["instance_id"] == INSTANCE
    assert producer["mode"] == "push" and producer["live"] is True
    _iso(producer["last_seen_at"]), _iso(producer["registered_at"])


def test_json_of_subscriptions_and_dead_letters(database_url: str, seeded: Seeded) -> None:
    listed = json.loads(invoke(database_url, "subscriptions", "--json").stdout)
    (subscription,) = listed["subscriptions"]
    assert subscription["consumer_group"] == CONSUMERS and subscription["tags"] == ["created"]
    _iso(subscription["created_at"])
    (lag,) = listed["lag"]
    assert (lag["consumer_group"], lag["dead_letters"]) == (CONSUMERS, 1)

    (letter,) = json.loads(invoke(database_url, "dlq", "list", "--json").stdout)["dead_letters"]
    assert letter["message_id"] == seeded.sent.message_id
    assert letter["transaction_id"] == seeded.sent.transaction_id
    assert letter["body_text"] == "order 1001 created" and letter["attempts"] == 1
    _iso(letter["dead_at"])


def test_json_of_a_transaction_is_what_http_answers(database_url: str, seeded: Seeded) -> None:
    shown = json.loads(
        invoke(database_url, "tx", "show", seeded.sent.transaction_id, "--json").stdout
    )
    assert shown["message_id"] == seeded.sent.message_id and shown["state"] == "committed"
    assert [(h["from_state"], h["to_state"]) for h in shown["history"]] == [
        (None, "prepared"),
        ("prepared", "committed"),
    ]
    assert all(_iso(h["at"]) for h in shown["history"])
    assert _iso(shown["resolved_at"]) >= _iso(shown["born_at"])


def test_json_of_tokens_and_the_database_revision(database_url: str, seeded: Seeded) -> None:
    (token,) = json.loads(invoke(database_url, "tokens", "list", "--json").stdout)
    assert token["name"] == TOKEN and token["consume_groups"] == [CONSUMERS]
    current = json.loads(invoke(database_url, "db", "current", "--json").stdout)
    assert current["up_to_date"] is True and current["current"] == current["latest"]
    assert current["database"] == database_url


@pytest.mark.parametrize(
    ("args", "whole"),
    [
        (("producers",), [PRODUCERS, INSTANCE]),
        (("subscriptions",), [CONSUMERS]),
        (("dlq", "list"), [CONSUMERS, "{message_id}"]),
        (("tx", "show", "{transaction_id}"), ["{transaction_id}", "{message_id}", PRODUCERS]),
        (("tokens", "list"), [TOKEN]),
    ],
)
def test_tables_at_80_columns_print_ids_whole(
    database_url: str, seeded: Seeded, args: tuple[str, ...], whole: list[str]
) -> None:
    ids = {"message_id": seeded.sent.message_id, "transaction_id": seeded.sent.transaction_id}
    result = invoke(database_url, *(a.format(**ids) for a in args))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    for text in whole:
        expected = text.format(**ids)
        assert any(expected in line for line in lines), f"{expected} cut in:\n{result.stdout}"


def test_config_show_says_where_each_value_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "coordinator.toml"
    config.write_text(
        'check_max = 3\nport = 9000\ncheck_push_secret = "hush"\n'
        'read_database_url = "postgresql://reader:r3ad@s1:5432,p1:5432/c"\n'
    )
    monkeypatch.setenv("COORDINATOR_PORT", "9100")
    monkeypatch.delenv("COORDINATOR_DATABASE_URL", raising=False)
    url = "postgresql://app:s3cret@db/coordinator"
    result = runner.invoke(
        app,
        ["--config", str(config), "config", "show", "--database-url", url],
        catch_exceptions=False,
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines() if line}
    assert rows["check_max"] == ["3", "file", str(config)]
    assert rows["port"] == ["9100", "environment", "COORDINATOR_PORT"]
    assert rows["database_url"] == ["postgresql://app:***@db/coordinator", "flag", "--database-url"]
    assert rows["check_push_secret"] == ["***", "file", str(config)]
    assert rows["read_database_url"] == [
        "postgresql://reader:***@s1:5432,p1:5432/c",
        "file",
        str(config),
    ]
    assert rows["retention_hours"] == ["72.0", "default"]
    assert "hush" not in result.stdout and "s3cret" not in result.stdout
    assert "r3ad" not in result.stdout

    shown = json.loads(
        runner.invoke(app, ["--config", str(config), "config", "show", "--json"]).stdout
    )
    assert shown["config_file"] == str(config)
    assert shown["settings"]["check_max"] == {"value": 3, "source": "file", "from": str(config)}
    assert shown["settings"]["port"]["source"] == "environment"
    assert shown["settings"]["check_push_secret"]["value"] == "***"
    assert shown["settings"]["read_database_url"]["value"].startswith("postgresql://reader:***@")
    assert shown["settings"]["host"] == {"value": "127.0.0.1", "source": "default", "from": None}


def test_a_bad_config_file_stops_every_command_with_a_sentence(tmp_path: Path) -> None:
    config = tmp_path / "coordinator.toml"
    config.write_text("check_max = 3\nchek_interval_seconds = 5\n")
    for args in (["config", "show"], ["status"], ["serve"]):
        result = runner.invoke(app, ["--config", str(config), *args], catch_exceptions=False)
        assert result.exit_code == 2, result.output
        assert result.output.startswith(
            f"error: {config}: 'chek_interval_seconds' is not a setting "
            "(did you mean check_interval_seconds?)"
        )
