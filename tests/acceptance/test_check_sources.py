"""Check sources through every surface: HTTP, the SDK, the CLI, /metrics.

One node (its own check-back scheduler running, short intervals) serves
each test; the producer's database is a database of its own on the tests'
PostgreSQL, reached over loopback TCP. Authentication is on: a token for
the producer group, one for another group, and an admin one.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import psycopg
import pytest
from pytest_postgresql.executors.noop import NoopExecutor
from typer.testing import CliRunner

from coordinator.cli import app
from coordinator.client import AsyncTransactionProducer, TransactionProducer
from coordinator.client.errors import InvalidRequest
from coordinator.client.listener import TransactionListener
from coordinator.client.message import LocalTransactionState, Message
from coordinator.config import Settings
from tests.conftest import LiveServer
from tests.factories import GROUP, TOPIC
from tests.producer_database import LoopbackProxy, ProducerDatabase, producer_database, socket_path

KEY = "the acceptance tests' check source key"
PATH = f"/v1/producer-groups/{GROUP}/check-source"
runner = CliRunner()


class _Unused(TransactionListener):
    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg: Message) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN


@dataclass
class Setup:
    server: LiveServer
    database_url: str
    producer_db: ProducerDatabase
    proxy_port: int
    group_token: str
    other_token: str
    admin_token: str

    def http(self, token: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database_url=None,
        check_source_key=KEY,
        transaction_timeout_seconds=0.2,
        check_interval_seconds=0.5,
        check_scan_interval_seconds=0.2,
        check_push_timeout_seconds=2.0,
    )


@pytest.fixture
def setup(
    database_url: str,
    settings: Settings,
    issue_token: Callable[..., str],
    postgresql_proc: NoopExecutor,
) -> Iterator[Setup]:
    group = issue_token("orders-app", produce_topics=(TOPIC,), producer_groups=(GROUP,))
    other = issue_token("billing-app", produce_topics=("bills",), producer_groups=("billing",))
    admin = issue_token("ops", admin=True)
    with (
        producer_database(postgresql_proc) as producer_db,
        LoopbackProxy(socket_path(postgresql_proc)) as proxy,
        LiveServer(database_url, settings) as server,
    ):
        yield Setup(server, database_url, producer_db, proxy.port, group, other, admin)


def _eventually_state(http: httpx.Client, transaction_id: str) -> str:
    deadline = time.monotonic() + 30
    while True:
        state = http.get(f"/v1/transactions/{transaction_id}").json()["state"]
        if state != "prepared" or time.monotonic() > deadline:
            return state
        time.sleep(0.1)


def test_a_registered_database_settles_half_messages_with_no_producer(setup: Setup) -> None:
    password = f"pw-{uuid.uuid4().hex}"
    url = setup.producer_db.tcp_url(setup.proxy_port, password=password)
    # the SDK, before start(): nothing of the producer runs afterwards
    TransactionProducer(
        GROUP, _Unused(), setup.server.url, token=setup.group_token
    ).set_check_source(url)
    with setup.http(setup.group_token) as http:
        shown = http.get(PATH)
        assert shown.status_code == 200, shown.text
        assert password not in shown.text
        assert shown.json()["url"].startswith(f"postgresql://{setup.producer_db.user}:***@")
        assert shown.json()["mode"] == "fallback"

        sent = [
            http.post(
                "/v1/transactions",
                json={"topic": TOPIC, "producer_group": GROUP, "body_text": f"order {n}"},
            ).json()
            for n in range(2)
        ]
        setup.producer_db.mark_committed(sent[0]["transaction_id"])
        assert _eventually_state(http, sent[0]["transaction_id"]) == "committed"
        assert _eventually_state(http, sent[1]["transaction_id"]) == "rolled_back"
        assert setup.producer_db.outcome(sent[1]["transaction_id"]) == "rolled_back"

        listed = http.get("/v1/producers", params={"producer_group": GROUP}).json()
        (source,) = listed["check_sources"]
        assert source["last_ok"] is True and source["last_check_at"] is not None
        assert password not in str(listed)
    with setup.http(setup.admin_token) as admin:
        metrics = admin.get("/metrics").text
        for outcome in ("committed", "rolled_back"):
            # counters are per process: other tests of the session may have added to them
            counted = re.search(
                rf'^coordinator_check_backs_database_total{{outcome="{outcome}"}} (\S+)$',
                metrics,
                re.MULTILINE,
            )
            assert counted is not None and float(counted.group(1)) >= 1
        everything = admin.get("/v1/check-sources").json()["check_sources"]
        assert [s["producer_group"] for s in everything] == [GROUP]
        assert password not in str(everything)
    with psycopg.connect(setup.database_url) as db:
        (stored,) = db.execute("SELECT t::text FROM check_sources AS t").fetchone()
    assert password not in stored


def test_refused_input_is_a_400_with_a_sentence(setup: Setup) -> None:
    with setup.http(setup.group_token) as http:
        for body, words in (
            ({"database_url": "postgresql://app:pw@169.254.169.254/orders"}, "link-local"),
            ({"database_url": "postgresql://app@[fe80::1]/orders"}, "link-local"),
            ({"database_url": "postgresql://app@127.0.0.1/orders", "mode": "often"}, "mode"),
            (
                {"database_url": "postgresql://app@127.0.0.1/orders", "barrier_table": "a;b"},
                "barrier_table",
            ),
        ):
            answer = http.put(PATH, json=body)
            assert answer.status_code == 400, answer.text
            assert words in answer.json()["message"]
        assert http.get(PATH).status_code == 404
    with pytest.raises(InvalidRequest, match="link-local"):
        TransactionProducer(
            GROUP, _Unused(), setup.server.url, token=setup.group_token
        ).set_check_source("postgresql://app@169.254.169.254/orders")


def test_another_groups_token_is_refused_and_the_owner_may_remove(setup: Setup) -> None:
    url = setup.producer_db.tcp_url(setup.proxy_port)
    with setup.http(setup.other_token) as other:
        assert other.put(PATH, json={"database_url": url}).status_code == 403
        assert other.get(PATH).status_code == 403
        assert other.delete(PATH).status_code == 403
        assert other.get("/v1/check-sources").status_code == 403

    async def with_the_async_sdk() -> None:
        producer = AsyncTransactionProducer(
            GROUP, _Unused(), setup.server.url, token=setup.group_token
        )
        await producer.set_check_source(url, mode="only")
        await producer.remove_check_source()
        await producer.remove_check_source()  # idempotent

    asyncio.run(with_the_async_sdk())
    with setup.http(setup.group_token) as http:
        assert http.get(PATH).status_code == 404


def test_the_cli_reads_the_url_from_the_environment_and_never_prints_the_password(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    password = f"pw-{uuid.uuid4().hex}"
    monkeypatch.setenv("COORDINATOR_CHECK_SOURCE_KEY", KEY)
    monkeypatch.setenv("ORDERS_DB", setup.producer_db.tcp_url(setup.proxy_port, password=password))
    base = ["--database-url", setup.database_url, "producers"]

    def run(*args: str, stdin: str | None = None) -> tuple[int, str]:
        result = runner.invoke(app, [*base, *args], input=stdin, catch_exceptions=False)
        return result.exit_code, " ".join(result.output.split())

    code, out = run("check-source", "set", GROUP, "--database-url-env", "ORDERS_DB", "--json")
    assert code == 0, out
    assert password not in out and ":***@" in out
    code, out = run(
        "check-source",
        "set",
        GROUP,
        "--mode",
        "only",
        "--database-url-stdin",
        stdin=setup.producer_db.tcp_url(setup.proxy_port, password=password) + "\n",
    )
    assert code == 0 and "mode only" in out and password not in out
    code, out = run()
    assert code == 0 and GROUP in out and "only" in out and password not in out
    code, out = run("--json")
    assert code == 0 and password not in out and '"check_sources"' in out
    code, out = run("check-source", "set", GROUP)  # no URL given
    assert code == 2 and "--database-url-env" in out
    monkeypatch.setenv("BAD_DB", "postgresql://app@169.254.169.254/orders")
    code, out = run("check-source", "set", GROUP, "--database-url-env", "BAD_DB")
    assert code == 4 and "link-local" in out
    code, out = run("check-source", "remove", GROUP)
    assert code == 0 and "removed" in out
    code, out = run("check-source", "show", GROUP)
    assert code == 3
