"""Schemathesis against the OpenAPI document, every operation, on a served coordinator.

What must hold for any request schemathesis makes of a route, valid or not:
no 5xx, a status the document lists for the route, the content type it
lists, and a body its schema describes. One coordinator serves the whole
module (a real uvicorn server on a real migrated database, as in
production: HotRoutes, the FastAPI app, the pool), authenticated with a
token that may do everything. It is seeded first with rows named as the
document's examples name them (topic `orders`, consumer group `billing`,
producer group `order-svc`, instance `10.0.0.7@4242`, message id
`order-1001`), so that requests built from the examples find real messages,
subscriptions, deliveries, dead letters and check requests.

Each operation gets a bounded number of examples, positive and negative,
derandomized so a run in CI is reproducible; then a short stateful run
follows the links schemathesis infers between operations (a sent message's
ids into its lookups and its end).
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from pytest_postgresql.executors.noop import NoopExecutor
from pytest_postgresql.janitor import DatabaseJanitor
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.domain.access import Grants
from coordinator.http import create_app
from tests.configs import configs
from tests.conftest import LiveServer, url_for
from tests.search_path import give_test_search_path

pytestmark = [
    # schemathesis draws from `random` inside its strategies; Hypothesis seeds
    # that generator per example, so a derandomized run stays reproducible.
    pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning"),
]

# The document the server serves (test_the_served_document_is_the_one_fuzzed);
# built here, without a database, because schemathesis parametrizes at collection.
DOCUMENT = create_app(configs().http).app.openapi()
schema = schemathesis.openapi.from_dict(DOCUMENT)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
# What bounds the module's time: about 30 requests an operation (plus the
# examples and boundary cases schemathesis adds), and the stateful run.
EXAMPLES = 30
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,  # nothing written to the work tree; derandomized runs repeat anyway
    suppress_health_check=list(HealthCheck),
)

# The document's examples (fields.py, consumers.py, checkback.py, routes.py).
TOPIC = "orders"
CONSUMERS = "billing"
PRODUCERS = "order-svc"
INSTANCE = "10.0.0.7@4242"
MESSAGE_ID = "order-1001"

SERVER_SETTINGS = Settings(
    database_url=None,
    # A long poll holds its request at most this long: schemathesis asks for
    # waits up to the documented 60 s, which the server refuses (400) above it.
    max_long_poll_seconds=0.2,
    # No check-backs while fuzzing: a push would call whatever check URL a
    # fuzzed heartbeat registered. The seed runs one round itself.
    check_scheduler_enabled=False,
    transaction_timeout_seconds=0.1,
    check_poll_fallback_seconds=0.05,
    # A fuzzed check source's password is encrypted with this, not a key file
    # made in the working directory.
    check_source_key="fuzzing",
)


@pytest.fixture(scope="module")
def fuzz_database(postgresql_proc: NoopExecutor) -> Iterator[str]:
    """A migrated database of this module's own (a copy of the suite's template)."""
    name = f"fuzz_http_{os.getpid()}"  # pytest may be pointed at a shared server
    janitor = DatabaseJanitor(
        user=postgresql_proc.user,
        host=postgresql_proc.host,
        port=postgresql_proc.port,
        dbname=name,
        template_dbname=postgresql_proc.template_dbname,
        maintenance_dbname=postgresql_proc.maintenance_dbname,
        password=postgresql_proc.password,
    )
    with janitor:
        url = url_for(
            postgresql_proc.host,
            postgresql_proc.port,
            postgresql_proc.user,
            name,
            postgresql_proc.password or None,
        )
        give_test_search_path(url)
        yield url


@pytest.fixture(scope="module")
def token(fuzz_database: str) -> str:
    async def create() -> str:
        async with Coordinator.connect(fuzz_database) as core:
            return (await core.tokens.create("fuzzer", Grants.everything())).token

    return asyncio.run(create())


@pytest.fixture(scope="module")
def server(fuzz_database: str, token: str) -> Iterator[LiveServer]:
    # The token exists before the server starts: it authenticates from the first request.
    with LiveServer(fuzz_database, SERVER_SETTINGS) as live:
        yield live


@pytest.fixture(scope="module")
def http(server: LiveServer, token: str) -> Iterator[httpx.Client]:
    headers = {"authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
        yield client


def _ok(response: httpx.Response) -> Any:
    assert response.status_code < 300, response.text
    return response.json() if response.content else None


@pytest.fixture(scope="module")
def seeded(http: httpx.Client, fuzz_database: str) -> None:
    """Rows under the document's example names, in every state a response describes."""
    group = f"/v1/consumer-groups/{CONSUMERS}"
    # One delivery attempt: a message received twice goes to the dead letters.
    _ok(http.put(f"{group}/subscriptions/{TOPIC}", json={"max_delivery_attempts": 1}))
    _ok(http.put(f"{group}/subscriptions/payments", json={"expression": "paid || refunded"}))
    # Normal messages: one with every field, one whose body is not UTF-8.
    _ok(
        http.post(
            "/v1/messages",
            json={
                "topic": TOPIC,
                "tags": "created",
                "keys": ["order-1000", "customer-7"],
                "properties": {"region": "eu"},
                "message_group": "customer-7",
                "body_text": "order 1000 created",
            },
        )
    )
    binary = base64.b64encode(b"\xff\xfe order").decode()
    _ok(http.post("/v1/messages", json={"topic": TOPIC, "body_base64": binary}))
    # Received once (in flight, briefly), then again: both go to the dead letters.
    first = _ok(http.post(f"{group}/receive", json={"invisible_seconds": 0.05}))
    assert len(first["messages"]) == 2, first
    time.sleep(0.2)
    assert _ok(http.post(f"{group}/receive", json={}))["messages"] == []
    dead = _ok(http.get(f"{group}/dead-letters"))["dead_letters"]
    assert len(dead) == 2, dead
    # Half messages: prepared, committed, rolled back, unknown; one with the example id.
    half = {"topic": TOPIC, "producer_group": PRODUCERS}
    sent = [
        _ok(http.post("/v1/transactions", json={**half, "body_text": f"tx {n}", **extra}))
        for n, extra in enumerate(({"message_id": MESSAGE_ID}, {}, {}, {}, {"tags": "paid"}))
    ]
    for result, resolution in zip(sent[1:], ("commit", "rollback", "unknown"), strict=False):
        end = {"producer_group": PRODUCERS, "resolution": resolution}
        _ok(http.post(f"/v1/transactions/{result['transaction_id']}/end", json=end))
    # A pulling producer instance, and check requests waiting for it.
    _ok(http.post(f"/v1/producers/{PRODUCERS}/instances/{INSTANCE}/heartbeat", json={}))
    with psycopg.connect(fuzz_database, autocommit=True) as db:
        db.execute("UPDATE messages SET next_check_at = now() WHERE state = 'prepared'")

    async def check_round() -> None:
        async with Coordinator.connect(fuzz_database, SERVER_SETTINGS) as core:
            await core.checkback.rounds.run_round()

    asyncio.run(check_round())


@pytest.fixture
def deliverable(http: httpx.Client, seeded: None) -> None:
    """Before each operation: `billing` subscribes to `orders`, with messages to receive.

    The operations before may have unsubscribed it (its deliveries go with
    it) or received everything: each operation starts from messages waiting.
    """
    group = f"/v1/consumer-groups/{CONSUMERS}"
    _ok(http.put(f"{group}/subscriptions/{TOPIC}", json={"max_delivery_attempts": 1}))
    for number in range(2):
        _ok(http.post("/v1/messages", json={"topic": TOPIC, "body_text": f"order {number}"}))


def test_the_served_document_is_the_one_fuzzed(http: httpx.Client) -> None:
    assert _ok(http.get("/openapi.json")) == DOCUMENT


@schema.parametrize()
@FUZZ
def test_every_operation_answers_as_documented(
    case: schemathesis.Case, server: LiveServer, token: str, deliverable: None
) -> None:
    case.call_and_validate(
        base_url=server.url,
        headers={"authorization": f"Bearer {token}"},
        checks=CHECKS,
        timeout=30,
    )


# What a scenario of the stateful run starts from: every table emptied but the tokens.
KEPT_TABLES = ("api_tokens", "alembic_version")


def test_sequences_of_operations_answer_as_documented(
    server: LiveServer, token: str, fuzz_database: str
) -> None:
    """Operations chained by the document's links (a send, then its lookups and end;
    a receive, then its ack), each scenario from empty tables.

    Hypothesis replays the beginnings of scenarios: answers that depend on
    what earlier scenarios left behind (a message id already used, a group
    already subscribed) would make its data generation inconsistent.
    """
    with psycopg.connect(fuzz_database, autocommit=True) as db:
        tables = [
            row[0]
            for row in db.execute(
                "SELECT format('%%I', tablename) FROM pg_tables "
                "WHERE schemaname = current_schema() AND NOT tablename = ANY(%s)",
                (list(KEPT_TABLES),),
            )
        ]
    empty = f"TRUNCATE {', '.join(tables)} CASCADE"

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            with psycopg.connect(fuzz_database, autocommit=True) as db:
                db.execute(empty)  # type: ignore[arg-type]

        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
            return {
                "base_url": server.url,
                "headers": {"authorization": f"Bearer {token}"},
                "timeout": 30,
            }

        def validate_response(  # type: ignore[override]
            self, response: schemathesis.Response, case: schemathesis.Case, **kwargs: Any
        ) -> None:
            case.validate_response(response, checks=CHECKS)

    Workflow.run(
        settings=settings(
            max_examples=15,
            stateful_step_count=8,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
    )


# --- what the fuzzing found, held directly ------------------------------------


def test_a_receipt_handle_past_the_bigint_range_is_refused_not_a_server_error(
    http: httpx.Client,
) -> None:
    # 19 digits passed the rule and reached PostgreSQL, which refused the
    # bigint: a 500 (and a dropped connection) on ack, batch ack and change.
    handle = "9" * 19 + "." + "f" * 32
    group = f"/v1/consumer-groups/{CONSUMERS}"
    for path, body in [
        ("/ack", {"receipt_handle": handle}),
        ("/ack/batch", {"receipt_handles": [handle]}),
        ("/change-invisible-duration", {"receipt_handle": handle, "invisible_seconds": 1}),
    ]:
        response = http.post(group + path, json=body)
        assert response.status_code == 400, (path, response.text)
        assert response.json()["error"] == "invalid_request"


def test_a_name_with_a_trailing_newline_is_refused(http: httpx.Client) -> None:
    # The rules matched with Python's `$`, which also matches before a final
    # newline: "orders\n" was stored as a topic the document's pattern refuses.
    for field in ("topic", "message_id"):
        message = {"topic": TOPIC, "body_text": "x", field: "orders\n"}
        response = http.post("/v1/messages", json=message)
        assert response.status_code == 400, (field, response.text)
