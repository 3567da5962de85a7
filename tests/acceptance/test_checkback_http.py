"""Check-backs through a served coordinator: its scheduler, the producer routes, /metrics."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import psycopg
import pytest

from coordinator.config import Settings
from tests.checkback_helpers import check_settings
from tests.conftest import LiveServer
from tests.factories import GROUP, TOPIC
from tests.push_receiver import PushReceiver, Received

SECRET = "push-secret"
INSTANCE_PATH = f"/v1/producers/{GROUP}/instances/instance-1"


@pytest.fixture
def settings() -> Settings:
    # the scheduler runs by itself in the served app, every 0.1 s
    return check_settings(
        check_scheduler_enabled=True,
        check_scan_interval_seconds=0.1,
        transaction_timeout_seconds=0.3,
        check_interval_seconds=1.0,
        check_push_secret=SECRET,
    )


@pytest.fixture
def http(live_server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_server.url, timeout=40) as client:
        yield client


def _send(http: httpx.Client, **extra: object) -> dict:
    body = {"topic": TOPIC, "producer_group": GROUP, "body_text": "order 1001 created", **extra}
    response = http.post("/v1/transactions", json=body)
    assert response.status_code == 201
    return response.json()


def test_the_served_scheduler_checks_back_a_pulling_producer(http: httpx.Client) -> None:
    registered = http.post(INSTANCE_PATH + "/heartbeat", json={})
    assert registered.status_code == 200
    sent = _send(http, tags="created", keys=["order-1001"])

    polled = http.get(INSTANCE_PATH + "/checks", params={"wait_seconds": 30})
    assert polled.status_code == 200
    (check,) = polled.json()["checks"]
    assert check["transaction_id"] == sent["transaction_id"]
    assert check["message_id"] == sent["message_id"] and check["offset"] == sent["offset"]
    assert check["producer_group"] == GROUP and check["check_count"] == 1
    assert check["topic"] == TOPIC and check["tags"] == "created"
    assert check["keys"] == ["order-1001"] and check["body_text"] == "order 1001 created"

    ended = http.post(
        f"/v1/transactions/{check['transaction_id']}/end",
        json={"producer_group": GROUP, "resolution": "commit", "from_check": True},
    )
    assert ended.status_code == 200 and ended.json()["state"] == "committed"
    record = http.get(f"/v1/transactions/{sent['transaction_id']}").json()
    assert record["resolution_source"] == "check"


def test_the_served_scheduler_pushes_a_signed_check_request(http: httpx.Client) -> None:
    def answer(request: Received) -> tuple[int, dict]:
        if not request.signed_with(SECRET):
            return 401, {"error": "bad signature"}
        return 200, {"resolution": "rollback"}

    with PushReceiver(answer) as receiver:
        registered = http.post(INSTANCE_PATH + "/heartbeat", json={"check_url": receiver.url})
        assert registered.json()["mode"] == "push"
        sent = _send(http)
        receiver.wait_for(1)
        deadline = time.monotonic() + 20
        while (record := http.get(f"/v1/offsets/{sent['offset']}").json())["state"] == "prepared":
            assert time.monotonic() < deadline, record
            time.sleep(0.05)
    assert (record["state"], record["resolution_source"]) == ("rolled_back", "check")
    assert receiver.received[0].signature.startswith("sha256=")


def test_the_producer_routes(http: httpx.Client, db: psycopg.Connection) -> None:
    first = http.post(INSTANCE_PATH + "/heartbeat")  # no body at all: a pulling instance
    assert first.status_code == 200
    body = first.json()
    assert {k: body[k] for k in ("producer_group", "instance_id", "check_url", "mode", "live")} == {
        "producer_group": GROUP,
        "instance_id": "instance-1",
        "check_url": None,
        "mode": "pull",
        "live": True,
    }
    assert body["ttl_seconds"] == 30.0 and body["registered_at"] and body["last_seen_at"]
    assert db.execute("SELECT instance_id FROM producers").fetchall() == [("instance-1",)]

    listed = http.get("/v1/producers", params={"producer_group": GROUP}).json()["producers"]
    assert [p["instance_id"] for p in listed] == ["instance-1"]
    assert http.get("/v1/producers", params={"producer_group": "nobody"}).json() == {
        "producers": [],
        "check_sources": [],
    }

    assert http.get(INSTANCE_PATH + "/checks", params={"wait_seconds": 0}).json() == {"checks": []}
    assert http.delete(INSTANCE_PATH).status_code == 204
    assert http.delete(INSTANCE_PATH).status_code == 204  # idempotent
    assert http.get("/v1/producers").json() == {"producers": [], "check_sources": []}


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status"),
    [
        ("post", f"/v1/producers/{GROUP}/instances/bad id/heartbeat", {"json": {}}, 400),
        ("post", "/v1/producers/bad group!/instances/i-1/heartbeat", {"json": {}}, 400),
        ("post", INSTANCE_PATH + "/heartbeat", {"json": {"check_url": "ftp://x/y"}}, 400),
        ("post", INSTANCE_PATH + "/heartbeat", {"json": {"check_url": "not a url"}}, 400),
        ("post", INSTANCE_PATH + "/heartbeat", {"json": {"checkurl": "http://x"}}, 422),
        ("get", INSTANCE_PATH + "/checks", {"params": {"wait_seconds": 61}}, 422),
        ("get", INSTANCE_PATH + "/checks", {"params": {"max_requests": 0}}, 422),
    ],
)
def test_bad_producer_requests_get_a_4xx_sentence(
    http: httpx.Client, method: str, path: str, kwargs: dict, status: int
) -> None:
    response = getattr(http, method)(path, **kwargs)
    assert response.status_code == status
    assert response.json()["error"] == "invalid_request" and response.json()["message"]


@pytest.mark.parametrize(
    ("check_url", "says"),
    [
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://[fe80::1]/x", "link-local"),
        ("http://metadata.google.internal/", "metadata"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://u:p@127.0.0.1/", "credentials"),
    ],
)
def test_check_urls_the_coordinator_must_not_call_get_a_400_sentence(
    http: httpx.Client, check_url: str, says: str
) -> None:
    response = http.post(INSTANCE_PATH + "/heartbeat", json={"check_url": check_url})
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert says in response.json()["message"]
    assert http.get("/v1/producers").json() == {"producers": [], "check_sources": []}


def test_metrics_show_half_messages_resolutions_and_check_backs(http: httpx.Client) -> None:
    http.post(INSTANCE_PATH + "/heartbeat", json={})
    pending = _send(http)
    resolved = _send(http, body_text="another")
    http.post(
        f"/v1/transactions/{resolved['transaction_id']}/end",
        json={"producer_group": GROUP, "resolution": "commit"},
    )
    (check,) = http.get(INSTANCE_PATH + "/checks", params={"wait_seconds": 30}).json()["checks"]
    assert check["offset"] == pending["offset"]

    response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    lines = response.text.splitlines()
    assert (
        f'coordinator_half_messages_outstanding{{producer_group="{GROUP}",topic="{TOPIC}"}} 1.0'
        in lines
    )
    assert f'coordinator_producer_instances{{live="true",producer_group="{GROUP}"}} 1.0' in lines
    for name in (
        'coordinator_transactions_resolved_total{source="client",state="committed"}',
        'coordinator_check_backs_dispatched_total{via="pull"}',
        "coordinator_check_round_seconds_count",
    ):
        (line,) = [line for line in lines if line.startswith(name + " ")]
        assert float(line.split()[-1]) >= 1, line


def test_openapi_documents_the_producer_routes(http: httpx.Client) -> None:
    paths = http.get("/openapi.json").json()["paths"]
    instance = "/v1/producers/{producer_group}/instances/{instance_id}"
    assert "post" in paths[instance + "/heartbeat"]
    assert "delete" in paths[instance]
    assert "get" in paths[instance + "/checks"]
    assert "get" in paths["/v1/producers"] and "get" in paths["/metrics"]
