"""`coordinator tokens create | list | revoke` against a real database and a served coordinator."""

from __future__ import annotations

import json
import time

import httpx
from typer.testing import CliRunner

from coordinator.cli import app
from coordinator.config import Settings
from tests.conftest import LiveServer
from tests.factories import GROUP, TOPIC

runner = CliRunner()


def invoke(database_url: str, *args: str):
    return runner.invoke(app, ["--database-url", database_url, *args], catch_exceptions=False)


def test_create_prints_the_token_once_and_it_works(database_url: str) -> None:
    created = invoke(
        database_url,
        "tokens",
        "create",
        "order-service",
        "--produce-topic",
        TOPIC,
        "--producer-group",
        GROUP,
        "--producer-group",
        "order-*",
    )
    assert created.exit_code == 0, created.output
    assert "created token 'order-service' (produce)" in created.output
    assert "it is not shown again" in created.output
    assert "from now on every request to the coordinator needs a token" in created.output
    (token,) = [word for word in created.output.split() if word.startswith("coord_")]

    listed = invoke(database_url, "tokens", "list")
    assert listed.exit_code == 0, listed.output
    assert "order-service" in listed.output and "order-*" in listed.output
    assert token not in listed.output  # never shown again

    with (
        LiveServer(database_url, Settings()) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        body = {"topic": TOPIC, "producer_group": GROUP, "body_text": "x"}
        mine = {"authorization": f"Bearer {token}"}
        assert http.post("/v1/transactions", json=body).status_code == 401
        assert http.post("/v1/transactions", json=body, headers=mine).status_code == 201

        revoked = invoke(database_url, "tokens", "revoke", "order-service")
        assert revoked.exit_code == 0, revoked.output
        assert "revoked token 'order-service'" in revoked.output
        assert "No live token is left" in revoked.output
        deadline = time.monotonic() + 15
        # The last token gone, the loopback server is open again: the revoked
        # token is not refused then, so look for the open door.
        while http.post("/v1/transactions", json=body).status_code != 201:
            assert time.monotonic() < deadline, "the server did not see the revoke"
            time.sleep(0.05)


def test_create_and_list_as_json(database_url: str) -> None:
    created = invoke(
        database_url,
        "tokens",
        "create",
        "billing",
        "--consume-group",
        "billing",
        "--consume-topic",
        "orders",
        "--metrics",
        "--json",
    )
    assert created.exit_code == 0, created.output
    printed = json.loads(created.stdout)
    assert printed["token"].startswith("coord_") and len(printed["token"]) == 49
    assert printed["name"] == "billing"
    assert printed["permissions"] == ["consume", "metrics"]
    assert printed["consume_groups"] == ["billing"] and printed["consume_topics"] == ["orders"]
    assert printed["produce_topics"] == [] and printed["admin"] is False
    assert printed["revoked_at"] is None
    assert "not shown again" in created.stderr

    assert invoke(database_url, "tokens", "create", "ops", "--admin").exit_code == 0
    assert invoke(database_url, "tokens", "revoke", "ops").exit_code == 0
    listed = invoke(database_url, "tokens", "list", "--json")
    assert listed.exit_code == 0, listed.output
    tokens = json.loads(listed.stdout)
    assert [t["name"] for t in tokens] == ["billing", "ops"]
    assert all("token" not in t for t in tokens)
    billing, ops = tokens
    assert billing["revoked_at"] is None and ops["revoked_at"] is not None
    assert ops["permissions"] == ["admin", "metrics"]

    table = invoke(database_url, "tokens", "list").output
    for shown in ("billing", "ops", "consume,", "metrics", "groups:", "orders", "admin"):
        assert shown in table


def test_token_mistakes_are_sentences_with_exit_codes(database_url: str) -> None:
    nothing = invoke(database_url, "tokens", "create", "idle")
    assert nothing.exit_code == 2 and "a token needs at least one permission" in nothing.output

    half = invoke(database_url, "tokens", "create", "half", "--produce-topic", TOPIC)
    assert half.exit_code == 2 and "produce needs both topics and producer groups" in half.output

    bad_name = invoke(database_url, "tokens", "create", "no spaces", "--admin")
    assert bad_name.exit_code == 2 and "token name 'no spaces'" in bad_name.output

    assert invoke(database_url, "tokens", "create", "ops", "--admin").exit_code == 0
    again = invoke(database_url, "tokens", "create", "ops", "--admin")
    assert again.exit_code == 4 and "a token named 'ops' exists already" in again.output

    unknown = invoke(database_url, "tokens", "revoke", "nobody")
    assert unknown.exit_code == 3 and "no live token named 'nobody'" in unknown.output

    empty = invoke(database_url, "tokens", "list")
    assert "ops" in empty.output
