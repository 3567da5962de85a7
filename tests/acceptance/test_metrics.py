"""/metrics of a live coordinator as traffic goes through it, read as Prometheus reads it.

Each server counts with its own core's meter, on a registry of its own, so
another core in the same process (an operator's) counts apart; every figure is
still compared before and after the traffic.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s

from bench.server import free_port
from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.domain.states import Resolution
from tests.checkback_helpers import check_settings
from tests.conftest import LiveServer
from tests.grpc_door import GrpcDoor, code, end_request, grpc_door, message, receive_request
from tests.push_receiver import PushReceiver, Received
from tests.scrape import Scrape, delta, scrape

DOCS = Path(__file__).resolve().parents[2] / "docs"
TOPIC = "orders"
RESOLVED = "coordinator_transactions_resolved_total"
LATENCY = "coordinator_resolution_latency_seconds"
ANSWERED = "coordinator_check_backs_answered_total"


@pytest.fixture
def door(database_url: str) -> Iterator[GrpcDoor]:
    settings = check_settings(
        check_scheduler_enabled=True,
        check_scan_interval_seconds=0.1,
        transaction_timeout_seconds=0.3,
        check_interval_seconds=0.3,
        check_max=3,
        check_push_timeout_seconds=2.0,
    )
    with grpc_door(database_url, settings) as door:
        yield door


@pytest.fixture
def http(door: GrpcDoor) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=door.server.url, timeout=40) as client:
        yield client


def _prepare(http: httpx.Client, group: str, **extra: object) -> dict[str, Any]:
    body = {"topic": TOPIC, "producer_group": group, "body_text": "order 1001", **extra}
    response = http.post("/v1/transactions", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def _end(
    http: httpx.Client, sent: dict[str, Any], group: str, resolution: str, **extra: object
) -> httpx.Response:
    return http.post(
        f"/v1/transactions/{sent['transaction_id']}/end",
        json={"producer_group": group, "resolution": resolution, **extra},
    )


def _state_becomes(http: httpx.Client, sent: dict[str, Any], state: str) -> None:
    deadline = time.monotonic() + 30
    while (record := http.get(f"/v1/offsets/{sent['offset']}").json())["state"] != state:
        assert time.monotonic() < deadline, record
        time.sleep(0.05)


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_every_way_a_half_message_is_resolved_is_counted_and_timed(
    door: GrpcDoor, http: httpx.Client, db: psycopg.Connection, database_url: str
) -> None:
    before = scrape(door.server.url)

    # the producer ends it: HTTP one by one, HTTP in a batch, gRPC
    one = _prepare(http, "by-client")
    assert _end(http, one, "by-client", "commit").status_code == 200
    batched = _prepare(http, "by-client")
    ended = http.post(
        "/v1/transactions/end-batch",
        json={
            "requests": [
                {
                    "transaction_id": batched["transaction_id"],
                    "producer_group": "by-client",
                    "resolution": "rollback",
                }
            ]
        },
    )
    assert ended.status_code == 200, ended.text
    half = door.send(message(TOPIC, b"over grpc", kind=d.TRANSACTION)).entries[0]
    assert door.call("EndTransaction", end_request(TOPIC, half, d.COMMIT)).status.code == code("OK")

    # a pulling producer answers its check-backs: commit, then unknown for another
    instance = "/v1/producers/by-pull/instances/i-1"
    assert http.post(instance + "/heartbeat", json={}).status_code == 200
    pulled = _prepare(http, "by-pull")
    (check,) = http.get(instance + "/checks", params={"wait_seconds": 20}).json()["checks"]
    assert check["offset"] == pulled["offset"]
    assert _end(http, pulled, "by-pull", "commit", from_check=True).status_code == 200
    unsure = _prepare(http, "by-pull")
    (check,) = http.get(instance + "/checks", params={"wait_seconds": 20}).json()["checks"]
    assert check["offset"] == unsure["offset"]
    assert _end(http, unsure, "by-pull", "unknown", from_check=True).status_code == 200
    # gone: its message now waits for a producer instead of using up its checks
    assert http.delete(instance).status_code == 204

    # a pushed check-back answered rollback
    def rollback(_: Received) -> tuple[int, dict[str, str]]:
        return 200, {"resolution": "rollback"}

    with PushReceiver(rollback) as receiver:
        registered = http.post(
            "/v1/producers/by-push/instances/i-1/heartbeat", json={"check_url": receiver.url}
        )
        assert registered.status_code == 200
        pushed = _prepare(http, "by-push")
        _state_becomes(http, pushed, "rolled_back")

    # pushes nobody answers (a closed port), until the check budget is used up
    dead_url = f"http://127.0.0.1:{free_port()}/check"
    registered = http.post(
        "/v1/producers/by-nobody/instances/i-1/heartbeat", json={"check_url": dead_url}
    )
    assert registered.status_code == 200
    unanswered = _prepare(http, "by-nobody")
    _state_becomes(http, unanswered, "discarded")

    # older than the retention (72 hours): expired at its next check
    old = _prepare(http, "by-nobody-at-all")
    db.execute(
        "UPDATE messages SET born_at = now() - interval '80 hours', next_check_at = now() "
        "WHERE id = %s",
        (old["offset"],),
    )
    _state_becomes(http, old, "expired")

    # an operator commits one by hand: the core that does it counts it, not the server's
    by_hand = _prepare(http, "by-operator")

    async def operator_commits() -> float | None:
        async with Coordinator.connect(database_url) as core:
            await core.checkback.operator.resolve(by_hand["offset"], Resolution.COMMIT)
            labels = {"state": "committed", "source": "operator"}
            return core.meter.registry.get_sample_value(RESOLVED, labels)

    assert asyncio.run(operator_commits()) == 1

    after = scrape(door.server.url)
    resolved = {
        ("committed", "client"): 2,
        ("rolled_back", "client"): 1,
        ("committed", "check"): 1,
        ("rolled_back", "check"): 1,
        ("discarded", "discard"): 1,
        ("expired", "expiry"): 1,
        ("committed", "operator"): 0,
    }
    for (state, source), count in resolved.items():
        assert delta(before, after, RESOLVED, state=state, source=source) == count, (state, source)
        timed = delta(before, after, f"{LATENCY}_count", state=state, source=source)
        assert timed == count, (state, source)
    expired_for = delta(before, after, f"{LATENCY}_sum", state="expired", source="expiry")
    assert 80 * 3600 <= expired_for < 81 * 3600
    # a client's commit came after its prepare, and long before the check-backs began
    committed_in = delta(before, after, f"{LATENCY}_sum", state="committed", source="client")
    assert 0 < committed_in < 2 * 0.3

    assert delta(before, after, ANSWERED, resolution="commit") == 1
    assert delta(before, after, ANSWERED, resolution="unknown") == 1
    assert delta(before, after, ANSWERED, resolution="rollback") == 1
    sent = "coordinator_check_backs_dispatched_total"
    assert delta(before, after, sent, via="pull") == 2
    assert delta(before, after, sent, via="push") == 1
    # three checks of the unanswered message, each a failed push, then the discard
    assert delta(before, after, "coordinator_check_back_push_failures_total") == 3


def test_redeliveries_are_counted_per_consumer_group(door: GrpcDoor, http: httpx.Client) -> None:
    subscribed = http.put(
        f"/v1/consumer-groups/billing/subscriptions/{TOPIC}", json={"expression": "*"}
    )
    assert subscribed.status_code == 201
    http.post("/v1/messages", json={"topic": TOPIC, "body_text": "once more"})
    before = scrape(door.server.url)
    receive = {"max_messages": 1, "invisible_seconds": 0.2, "wait_seconds": 5}
    first = http.post("/v1/consumer-groups/billing/receive", json=receive).json()["messages"]
    assert first[0]["delivery_attempt"] == 1
    again = http.post("/v1/consumer-groups/billing/receive", json=receive).json()["messages"]
    assert again[0]["delivery_attempt"] == 2  # not acked in time: delivered again
    after = scrape(door.server.url)
    redelivered = "coordinator_redeliveries_total"
    assert delta(before, after, redelivered, consumer_group="billing") == 1


ROUTE_TEMPLATES = {
    "/v1/transactions",
    "/v1/transactions/{transaction_id}/end",
    "/v1/transactions/{transaction_id}",
    "(unmatched)",
}


def test_http_requests_are_counted_by_route_template_and_status_and_timed(
    door: GrpcDoor, http: httpx.Client
) -> None:
    before = scrape(door.server.url)
    sent = _prepare(http, "by-client")  # a hot route: 201
    bad = http.post("/v1/transactions", json={"topic": TOPIC})  # hot, refused: 422
    assert bad.status_code == 422
    missing = _end(http, {"transaction_id": "f" * 32}, "by-client", "commit")  # hot: 404
    assert missing.status_code == 404
    assert _end(http, sent, "by-client", "commit").status_code == 200
    assert http.get(f"/v1/transactions/{sent['transaction_id']}").status_code == 200  # FastAPI
    assert http.get("/v1/no-such-route/abc").status_code == 404
    after = scrape(door.server.url)

    requests = "coordinator_http_requests_total"
    expected = {
        ("POST", "/v1/transactions", "201"): 1,
        ("POST", "/v1/transactions", "422"): 1,
        ("POST", "/v1/transactions/{transaction_id}/end", "404"): 1,
        ("POST", "/v1/transactions/{transaction_id}/end", "200"): 1,
        ("GET", "/v1/transactions/{transaction_id}", "200"): 1,
        ("GET", "(unmatched)", "404"): 1,
    }
    for (method, route, status), count in expected.items():
        counted = delta(before, after, requests, method=method, route=route, status=status)
        assert counted == count, (method, route, status)
    timed = "coordinator_http_request_duration_seconds_count"
    assert delta(before, after, timed, method="POST", route="/v1/transactions") == 2
    assert delta(before, after, timed, method="GET", route="(unmatched)") == 1
    # never a raw path: no id of a message became a label
    routes = {dict(key)["route"] for key in after.series(requests)}
    assert not any(sent["transaction_id"] in route or "abc" in route for route in routes)
    assert routes >= ROUTE_TEMPLATES


def test_grpc_calls_are_counted_by_rpc_and_rocketmq_code_and_timed(door: GrpcDoor) -> None:
    before = scrape(door.server.url)
    route = door.call("QueryRoute", s.QueryRouteRequest(topic=d.Resource(name=TOPIC)))
    assert route.status.code == code("OK")
    half = door.send(message(TOPIC, b"t", kind=d.TRANSACTION)).entries[0]
    unknown = end_request(TOPIC, half, d.COMMIT)
    unknown.transaction_id = ""
    assert door.call("EndTransaction", unknown).status.code == code("INVALID_TRANSACTION_ID")
    nothing = door.receive(receive_request("billing", TOPIC, wait=0))
    assert nothing[0].status.code == code("MESSAGE_NOT_FOUND")
    assert door.call("GetOffset", s.GetOffsetRequest()).status.code == code("UNSUPPORTED")
    after = scrape(door.server.url)

    calls = "coordinator_grpc_requests_total"
    for rpc, rocketmq_code in [
        ("QueryRoute", "OK"),
        ("SendMessage", "OK"),
        ("EndTransaction", "INVALID_TRANSACTION_ID"),
        ("ReceiveMessage", "MESSAGE_NOT_FOUND"),
        ("GetOffset", "UNSUPPORTED"),
    ]:
        assert delta(before, after, calls, rpc=rpc, code=rocketmq_code) == 1, rpc
        timed = delta(before, after, "coordinator_grpc_request_duration_seconds_count", rpc=rpc)
        assert timed == 1, rpc


def test_pool_gauges_show_connections_in_use_and_requests_waiting(
    database_url: str, db: psycopg.Connection
) -> None:
    settings = Settings(
        database_url=None,
        pool_min_size=1,
        pool_max_size=2,
        pool_timeout_seconds=60,
        # nothing else of the server asks the pool for a connection meanwhile
        check_scheduler_enabled=False,
        retention_enabled=False,
        token_refresh_seconds=3600,
    )
    with LiveServer(database_url, settings) as server, httpx.Client(timeout=90) as client:
        idle = scrape(server.url)
        assert idle.value("coordinator_db_pool_waiting") == 0
        assert idle.value("coordinator_db_pool_connections", state="in_use") == 0
        pool = _served_core(server).pool
        blocked: list[threading.Thread] = []
        scraped: list[Scrape] = []
        db.execute("BEGIN")
        try:
            # Every read of messages now waits for this lock: two requests hold
            # both connections of the pool, three more wait for one.
            db.execute("LOCK TABLE messages IN ACCESS EXCLUSIVE MODE")
            for _ in range(5):
                thread = threading.Thread(target=client.get, args=(f"{server.url}/v1/offsets/1",))
                thread.start()
                blocked.append(thread)
            # Both connections given out and three requests waiting: all five
            # arrived (waiting alone may pass 3 while the pool still grows).
            _wait_for(lambda: _in_use_and_waiting(pool) == (2, 3), "2 in use, 3 waiting")
            scraper = threading.Thread(target=lambda: scraped.append(scrape(server.url)))
            scraper.start()
            # the scrape read the pool's figures, then waits for a connection too
            _wait_for(lambda: _in_use_and_waiting(pool) == (2, 4), "the scrape")
        finally:
            db.execute("ROLLBACK")
        for thread in [*blocked, scraper]:
            thread.join(timeout=60)
        (busy,) = scraped
        assert busy.value("coordinator_db_pool_connections", state="in_use") == 2
        assert busy.value("coordinator_db_pool_connections", state="idle") == 0
        assert busy.value("coordinator_db_pool_waiting") == 3


def _served_core(server: LiveServer) -> Coordinator:
    return server.core


METRIC_ROW = re.compile(r"^\| `(coordinator_[a-z_]+)(?:\{[^}]*\})?` \|", re.M)


def test_the_operations_page_lists_every_metric_a_live_server_exposes(door: GrpcDoor) -> None:
    door.send(message(TOPIC, b"n"))  # the gRPC door has served a call
    exposed = {name for name in scrape(door.server.url).names() if name.startswith("coordinator_")}
    page = (DOCS / "operations.md").read_text()
    listed = set(METRIC_ROW.findall(page))
    assert sorted(exposed - listed) == [], "exposed but not on docs/operations.md"
    assert sorted(listed - exposed) == [], "on docs/operations.md but not exposed"


def test_requests_the_protocol_refuses_are_counted_too(database_url: str) -> None:
    with LiveServer(database_url, Settings(database_url=None, max_connections=2)) as server:
        before = scrape(server.url)
        address = ("127.0.0.1", server.port)
        with socket.create_connection(address) as held, socket.create_connection(address) as also:
            held.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")  # both are served ...
            also.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
            assert held.recv(100).startswith(b"HTTP/1.1 200") and also.recv(100)
            with socket.create_connection(address, timeout=10) as over:  # ... a third is not
                assert over.recv(100).startswith(b"HTTP/1.1 429")
        # once the server saw them close, a scrape gets a connection
        (http_door, *_) = server.doors
        _wait_for(lambda: not http_door.open_connections, "connections closed")
        after = scrape(server.url)
    refused = delta(
        before,
        after,
        "coordinator_http_requests_total",
        method="-",
        route="(too many connections)",
        status="429",
    )
    assert refused == 1


def _in_use_and_waiting(pool: object) -> tuple[int, int]:
    stats = pool.get_stats()  # type: ignore[attr-defined]
    in_use = stats.get("pool_size", 0) - stats.get("pool_available", 0)
    return in_use, stats.get("requests_waiting", 0)
