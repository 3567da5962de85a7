"""The consumer routes end to end, through a coordinator serving on a real socket."""

from __future__ import annotations

import base64
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest

from tests.conftest import LiveServer
from tests.factories import GROUP as PRODUCERS
from tests.factories import TOPIC

CONSUMERS = "billing"
BASE = f"/v1/consumer-groups/{CONSUMERS}"


@pytest.fixture
def http(live_server: LiveServer) -> httpx.Client:
    with httpx.Client(base_url=live_server.url, timeout=30) as client:
        yield client


def _commit(http: httpx.Client, body_text: str = "order 1001 created", **fields: object) -> dict:
    sent = http.post(
        "/v1/transactions",
        json={"topic": TOPIC, "producer_group": PRODUCERS, "body_text": body_text, **fields},
    ).json()
    ended = http.post(
        f"/v1/transactions/{sent['transaction_id']}/end",
        json={"producer_group": PRODUCERS, "resolution": "commit"},
    )
    assert ended.status_code == 200, ended.text
    return sent


def _subscribe(http: httpx.Client, **body: object) -> httpx.Response:
    return http.put(f"{BASE}/subscriptions/{TOPIC}", json=body)


def _receive(http: httpx.Client, **body: object) -> list[dict]:
    response = http.post(f"{BASE}/receive", json=body)
    assert response.status_code == 200, response.text
    return response.json()["messages"]


def test_openapi_documents_the_consumer_routes(http: httpx.Client) -> None:
    paths = http.get("/openapi.json").json()["paths"]
    group = "/v1/consumer-groups/{consumer_group}"
    for path in (
        group + "/subscriptions/{topic}",
        group + "/subscriptions",
        group + "/receive",
        group + "/ack",
        group + "/ack/batch",
        group + "/change-invisible-duration",
        group + "/dead-letters",
        group + "/dead-letters/requeue",
        group + "/dead-letters/{dead_letter_id}/requeue",
        group + "/lag",
    ):
        assert path in paths, path


def test_subscribe_change_list_and_unsubscribe(http: httpx.Client) -> None:
    created = _subscribe(http, expression="created || paid", fifo=True)
    assert created.status_code == 201
    body = created.json()
    assert body["created"] is True and body["tags"] == ["created", "paid"]
    assert body["fifo"] is True and body["max_delivery_attempts"] == 16

    changed = _subscribe(http)
    assert changed.status_code == 200
    assert changed.json()["created"] is False and changed.json()["tags"] is None

    listed = http.get(f"{BASE}/subscriptions").json()["subscriptions"]
    assert [(s["topic"], s["expression"], s["fifo"]) for s in listed] == [(TOPIC, "*", False)]

    removed = http.delete(f"{BASE}/subscriptions/{TOPIC}")
    assert removed.status_code == 200 and removed.json()["topic"] == TOPIC
    again = http.delete(f"{BASE}/subscriptions/{TOPIC}")
    assert again.status_code == 404 and again.json()["error"] == "not_found"


def test_a_sql92_subscription_gets_only_the_messages_it_selects(http: httpx.Client) -> None:
    condition = "amount BETWEEN 100 AND 500 AND (region = 'eu' OR TAGS = 'vip')"
    created = _subscribe(http, expression=condition, filter_type="sql92")
    assert created.status_code == 201, created.text
    assert created.json()["filter_type"] == "sql92" and created.json()["tags"] is None
    for body_text, tags, properties in [
        ("eu", "created", {"amount": "120", "region": "eu"}),
        ("too big", "created", {"amount": "1200", "region": "eu"}),
        ("vip", "vip", {"amount": "100", "region": "us"}),
        ("us", "created", {"amount": "200", "region": "us"}),
        ("no amount", "vip", {}),
    ]:
        _commit(http, body_text, tags=tags, properties=properties)
    received = _receive(http, max_messages=10)
    assert sorted(m["body_text"] for m in received) == ["eu", "vip"]
    listed = http.get(f"{BASE}/subscriptions").json()["subscriptions"]
    assert [(s["expression"], s["filter_type"]) for s in listed] == [(condition, "sql92")]


def test_a_bad_sql92_expression_gets_400_with_its_position(http: httpx.Client) -> None:
    refused = _subscribe(http, expression="region = 'eu' AND amount >> 5", filter_type="sql92")
    assert refused.status_code == 400, refused.text
    body = refused.json()
    assert body["error"] == "invalid_filter_expression"
    assert body["position"] == 27  # the second ">"
    assert "position 27" in body["message"]
    unknown = _subscribe(http, expression="a = 1", filter_type="sql")
    assert unknown.status_code in (400, 422) and "filter_type" in unknown.json()["message"]
    assert http.get(f"{BASE}/subscriptions").json()["subscriptions"] == []


def test_commit_receive_ack(http: httpx.Client, db: psycopg.Connection) -> None:
    _subscribe(http)
    sent = _commit(http, tags="created", keys=["order-1001"], properties={"region": "eu"})
    (message,) = _receive(http, invisible_seconds=60)
    assert message["message_id"] == sent["message_id"] and message["offset"] == sent["offset"]
    assert message["transaction_id"] == sent["transaction_id"]
    assert message["body_text"] == "order 1001 created"
    assert base64.b64decode(message["body_base64"]) == b"order 1001 created"
    assert message["tags"] == "created" and message["keys"] == ["order-1001"]
    assert message["properties"] == {"region": "eu"}
    assert message["delivery_attempt"] == 1 and message["consumer_group"] == CONSUMERS
    assert message["producer_group"] == PRODUCERS and message["topic"] == TOPIC
    for field in ("born_at", "committed_at", "invisible_until", "receipt_handle"):
        assert message[field]
    assert _receive(http) == []  # in flight

    acked = http.post(f"{BASE}/ack", json={"receipt_handle": message["receipt_handle"]})
    assert acked.status_code == 200
    assert acked.json() == {"receipt_handle": message["receipt_handle"], "outcome": "acked"}
    assert db.execute("SELECT count(*) FROM deliveries").fetchone() == (0,)
    twice = http.post(f"{BASE}/ack", json={"receipt_handle": message["receipt_handle"]})
    assert twice.status_code == 404 and "acked already" in twice.json()["message"]


def test_rolled_back_messages_never_arrive(http: httpx.Client) -> None:
    _subscribe(http)
    sent = http.post(
        "/v1/transactions",
        json={"topic": TOPIC, "producer_group": PRODUCERS, "body_text": "nope"},
    ).json()
    http.post(
        f"/v1/transactions/{sent['transaction_id']}/end",
        json={"producer_group": PRODUCERS, "resolution": "rollback"},
    )
    assert _receive(http, wait_seconds=0.3) == []


def test_binary_bodies_arrive_as_base64_only(http: httpx.Client) -> None:
    _subscribe(http)
    raw = bytes(range(256))
    http.post("/v1/messages", json={"topic": TOPIC, "body_base64": base64.b64encode(raw).decode()})
    (message,) = _receive(http)
    assert message["body_text"] is None and base64.b64decode(message["body_base64"]) == raw
    assert message["transaction_id"] is None


def test_redelivery_stale_handles_and_changing_the_invisible_duration(
    http: httpx.Client,
) -> None:
    _subscribe(http)
    _commit(http)
    (first,) = _receive(http, invisible_seconds=0.2)
    deadline = time.monotonic() + 15
    while not (again := _receive(http, invisible_seconds=60)):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert again[0]["delivery_attempt"] == 2

    stale = http.post(f"{BASE}/ack", json={"receipt_handle": first["receipt_handle"]})
    assert stale.status_code == 409 and stale.json()["error"] == "receipt_handle_stale"

    changed = http.post(
        f"{BASE}/change-invisible-duration",
        json={"receipt_handle": again[0]["receipt_handle"], "invisible_seconds": 120},
    )
    assert changed.status_code == 200
    renewed = changed.json()
    assert renewed["delivery_attempt"] == 2
    assert renewed["receipt_handle"] != again[0]["receipt_handle"]
    old = http.post(
        f"{BASE}/change-invisible-duration",
        json={"receipt_handle": again[0]["receipt_handle"], "invisible_seconds": 120},
    )
    assert old.status_code == 409 and old.json()["error"] == "receipt_handle_stale"

    batch = http.post(
        f"{BASE}/ack/batch",
        json={"receipt_handles": [again[0]["receipt_handle"], renewed["receipt_handle"]]},
    )
    assert batch.status_code == 200
    assert [r["outcome"] for r in batch.json()["results"]] == ["stale", "acked"]


def test_dead_letters_list_and_requeue(http: httpx.Client) -> None:
    _subscribe(http, max_delivery_attempts=1)
    sent = [_commit(http, body_text=f"poison {i}") for i in range(3)]
    assert len(_receive(http, invisible_seconds=0.05)) == 3
    time.sleep(0.1)
    assert _receive(http) == []  # out of attempts: dead-lettered

    letters = http.get(f"{BASE}/dead-letters").json()["dead_letters"]
    assert [d["offset"] for d in letters] == [s["offset"] for s in sent]
    assert letters[0]["attempts"] == 1 and letters[0]["body_text"] == "poison 0"
    lag = http.get(f"{BASE}/lag").json()["lag"]
    assert lag == [
        {
            "consumer_group": CONSUMERS,
            "topic": TOPIC,
            "lag": 0,
            "in_flight": 0,
            "dead_letters": 3,
            "oldest_pending_at": None,
        }
    ]

    one = http.post(f"{BASE}/dead-letters/{letters[0]['id']}/requeue")
    assert one.status_code == 200 and one.json() == {"requeued": 1}
    missing = http.post(f"{BASE}/dead-letters/{letters[0]['id']}/requeue")
    assert missing.status_code == 404
    rest = http.post(f"{BASE}/dead-letters/requeue", json={"topic": TOPIC})
    assert rest.json() == {"requeued": 2}
    assert http.post(f"{BASE}/dead-letters/requeue").json() == {"requeued": 0}
    received = _receive(http)
    assert sorted(m["body_text"] for m in received) == ["poison 0", "poison 1", "poison 2"]
    assert {m["delivery_attempt"] for m in received} == {1}


def test_fifo_over_http(http: httpx.Client) -> None:
    _subscribe(http, fifo=True)
    for i in range(3):
        _commit(http, body_text=f"step {i}", message_group="order-1")
    (head,) = _receive(http)
    assert head["body_text"] == "step 0" and head["message_group"] == "order-1"
    assert _receive(http) == []
    http.post(f"{BASE}/ack", json={"receipt_handle": head["receipt_handle"]})
    assert [m["body_text"] for m in _receive(http)] == ["step 1"]


def test_a_long_poll_returns_the_message_committed_while_it_waits(
    http: httpx.Client, live_server: LiveServer
) -> None:
    _subscribe(http)
    # Only a notification can wake the receive within this test.
    live_server.core.delivery.poll_interval_seconds = 3600
    with ThreadPoolExecutor(max_workers=1) as pool:
        waiting = pool.submit(_receive, http, wait_seconds=60)
        time.sleep(0.3)
        assert not waiting.done()
        with httpx.Client(base_url=live_server.url, timeout=30) as producer:
            _commit(producer, body_text="arrived while waiting")
        messages = waiting.result(timeout=20)
    assert [m["body_text"] for m in messages] == ["arrived while waiting"]


def test_status_shows_consumer_lag(http: httpx.Client) -> None:
    _subscribe(http)
    _commit(http)
    _commit(http)
    _receive(http, max_messages=1)
    status = http.get("/v1/status").json()
    (lag,) = status["consumer_lag"]
    assert (lag["consumer_group"], lag["topic"], lag["lag"], lag["in_flight"]) == (
        CONSUMERS,
        TOPIC,
        2,
        1,
    )
    assert lag["oldest_pending_at"] is not None


@pytest.mark.parametrize(
    ("method", "path", "payload", "status", "phrase"),
    [
        ("PUT", f"{BASE}/subscriptions/no%20spaces", {}, 400, "topic"),
        ("PUT", "/v1/consumer-groups/a%20b/subscriptions/orders", {}, 400, "consumer group"),
        ("PUT", f"{BASE}/subscriptions/{TOPIC}", {"expression": "A ||"}, 400, "empty tag"),
        ("PUT", f"{BASE}/subscriptions/{TOPIC}", {"max_delivery_attempts": 0}, 400, "attempts"),
        ("PUT", f"{BASE}/subscriptions/{TOPIC}", {"fifo": "perhaps"}, 422, "fifo"),
        ("PUT", f"{BASE}/subscriptions/{TOPIC}", {"surprise": 1}, 422, "surprise"),
        ("POST", f"{BASE}/receive", {"max_messages": 0}, 400, "max messages"),
        ("POST", f"{BASE}/receive", {"invisible_seconds": 0}, 400, "invisible duration"),
        ("POST", f"{BASE}/receive", {"wait_seconds": 600}, 400, "wait time"),
        ("POST", f"{BASE}/receive", {"topic": "payments"}, 404, "does not subscribe"),
        ("POST", "/v1/consumer-groups/nobody/receive", {}, 404, "does not subscribe"),
        ("POST", f"{BASE}/ack", {"receipt_handle": "forged"}, 400, "receipt handle"),
        ("POST", f"{BASE}/ack", {}, 422, "receipt_handle"),
        ("POST", f"{BASE}/ack", {"receipt_handle": "7." + "0" * 32}, 404, "receipt handle"),
        ("POST", f"{BASE}/ack/batch", {"receipt_handles": []}, 400, "at least one"),
        (
            "POST",
            f"{BASE}/change-invisible-duration",
            {"receipt_handle": "7." + "0" * 32, "invisible_seconds": -1},
            400,
            "invisible duration",
        ),
        ("GET", f"{BASE}/dead-letters?limit=5000", None, 400, "limit"),
        ("POST", f"{BASE}/dead-letters/0/requeue", None, 422, "dead_letter_id"),
        ("POST", f"{BASE}/dead-letters/99/requeue", None, 404, "no dead letter 99"),
    ],
)
def test_bad_input_gets_a_clear_4xx(
    http: httpx.Client, method: str, path: str, payload: dict | None, status: int, phrase: str
) -> None:
    _subscribe(http)
    response = http.request(method, path, json=payload)
    assert response.status_code == status, response.text
    assert response.json()["error"] and phrase in response.json()["message"]
