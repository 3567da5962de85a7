"""The HTTP API end to end, through a coordinator serving on a real socket."""

from __future__ import annotations

import base64

import httpx
import psycopg
import pytest

from coordinator.config import Settings
from tests.conftest import LiveServer
from tests.factories import GROUP, TOPIC


@pytest.fixture
def http(live_server: LiveServer) -> httpx.Client:
    with httpx.Client(base_url=live_server.url, timeout=10) as client:
        yield client


def _half(**overrides: object) -> dict:
    body = {"topic": TOPIC, "producer_group": GROUP, "body_text": "order 1001 created"}
    body.update(overrides)
    return body


def test_health_reports_the_database(http: httpx.Client) -> None:
    response = http.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok"}


def test_openapi_documents_every_route(http: httpx.Client) -> None:
    paths = http.get("/openapi.json").json()["paths"]
    for path in (
        "/health",
        "/v1/transactions",
        "/v1/transactions/batch",
        "/v1/transactions/{transaction_id}/end",
        "/v1/transactions/{transaction_id}",
        "/v1/messages",
        "/v1/messages/batch",
        "/v1/messages/{message_id}",
        "/v1/offsets/{offset}",
        "/v1/status",
    ):
        assert path in paths


def test_prepare_commit_and_look_up(http: httpx.Client, db: psycopg.Connection) -> None:
    sent = http.post("/v1/transactions", json=_half(tags="created", keys=["order-1001"]))
    assert sent.status_code == 201
    ids = sent.json()
    assert ids["state"] == "prepared" and ids["created"] is True

    ended = http.post(
        f"/v1/transactions/{ids['transaction_id']}/end",
        json={"producer_group": GROUP, "resolution": "commit"},
    )
    assert ended.status_code == 200
    assert ended.json() == {
        "offset": ids["offset"],
        "message_id": ids["message_id"],
        "transaction_id": ids["transaction_id"],
        "state": "committed",
        "changed": True,
    }
    assert db.execute("SELECT state FROM messages WHERE id = %s", (ids["offset"],)).fetchone() == (
        "committed",
    )

    for path in (
        f"/v1/transactions/{ids['transaction_id']}",
        f"/v1/messages/{ids['message_id']}",
        f"/v1/offsets/{ids['offset']}",
    ):
        found = http.get(path)
        assert found.status_code == 200, path
        message = found.json()
        assert message["body_text"] == "order 1001 created"
        assert base64.b64decode(message["body_base64"]) == b"order 1001 created"
        assert message["keys"] == ["order-1001"] and message["tags"] == "created"
        assert [(h["from_state"], h["to_state"]) for h in message["history"]] == [
            (None, "prepared"),
            ("prepared", "committed"),
        ]


def test_binary_bodies_travel_as_base64(http: httpx.Client, db: psycopg.Connection) -> None:
    raw = bytes(range(256))
    sent = http.post(
        "/v1/transactions",
        json=_half(body_text=None, body_base64=base64.b64encode(raw).decode()),
    ).json()
    assert (
        db.execute("SELECT body FROM messages WHERE id = %s", (sent["offset"],)).fetchone()[0]
        == raw
    )
    message = http.get(f"/v1/offsets/{sent['offset']}").json()
    assert message["body_text"] is None
    assert base64.b64decode(message["body_base64"]) == raw


def test_a_retry_with_the_same_message_id_returns_the_first_result(http: httpx.Client) -> None:
    first = http.post("/v1/transactions", json=_half(message_id="ORDER-1001"))
    again = http.post("/v1/transactions", json=_half(message_id="ORDER-1001"))
    assert (first.status_code, again.status_code) == (201, 200)
    assert {**first.json(), "created": None} == {**again.json(), "created": None}
    reused = http.post("/v1/transactions", json=_half(message_id="ORDER-1001", body_text="x"))
    assert reused.status_code == 409 and reused.json()["error"] == "message_id_conflict"


def test_end_answers_conflicts_mismatches_and_unknown_ids(http: httpx.Client) -> None:
    tx = http.post("/v1/transactions", json=_half()).json()["transaction_id"]
    end = f"/v1/transactions/{tx}/end"

    unknown = http.post(end, json={"producer_group": GROUP, "resolution": "unknown"})
    assert unknown.status_code == 200 and unknown.json()["changed"] is False

    wrong_group = http.post(end, json={"producer_group": "other", "resolution": "commit"})
    assert wrong_group.status_code == 409
    assert wrong_group.json()["error"] == "producer_group_mismatch"

    assert (
        http.post(end, json={"producer_group": GROUP, "resolution": "rollback"}).status_code == 200
    )
    repeat = http.post(end, json={"producer_group": GROUP, "resolution": "rollback"})
    assert repeat.status_code == 200 and repeat.json()["changed"] is False

    conflict = http.post(end, json={"producer_group": GROUP, "resolution": "commit"})
    assert conflict.status_code == 409
    assert conflict.json()["error"] == "state_conflict"
    assert conflict.json()["current_state"] == "rolled_back"
    assert "already rolled_back" in conflict.json()["message"]

    missing = http.post(
        "/v1/transactions/feedface/end", json={"producer_group": GROUP, "resolution": "commit"}
    )
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"


def test_batches_and_normal_messages(http: httpx.Client) -> None:
    batch = http.post("/v1/transactions/batch", json={"messages": [_half(), _half(), _half()]})
    assert batch.status_code == 200
    results = batch.json()["results"]
    assert len(results) == 3 and all(r["state"] == "prepared" for r in results)

    normal = http.post("/v1/messages", json={"topic": TOPIC, "body_text": "hello"})
    assert normal.status_code == 201
    assert normal.json()["state"] == "committed" and normal.json()["transaction_id"] is None
    normals = http.post(
        "/v1/messages/batch", json={"messages": [{"topic": TOPIC, "body_text": "a"}]}
    )
    assert normals.status_code == 200 and normals.json()["results"][0]["state"] == "committed"

    status = http.get("/v1/status").json()
    assert status["pending_total"] == 3
    assert status["oldest_pending_transaction_id"] == results[0]["transaction_id"]


@pytest.mark.parametrize(
    ("path", "payload", "status", "phrase"),
    [
        ("/v1/transactions", _half(topic="no spaces"), 400, "topic"),
        ("/v1/transactions", _half(topic="t" * 128), 400, "127"),
        ("/v1/transactions", _half(producer_group="a/b"), 400, "producer group"),
        ("/v1/transactions", _half(producer_group=None), 400, "producer group is required"),
        ("/v1/transactions", _half(body_text=""), 400, "empty"),
        ("/v1/transactions", _half(properties={"x": "y" * 40000}), 400, "properties"),
        ("/v1/transactions", _half(body_text=None, body_base64="***"), 422, "base64"),
        ("/v1/transactions", _half(body_base64="aGk="), 422, "exactly one"),
        ("/v1/transactions", {"topic": TOPIC}, 422, "exactly one"),
        ("/v1/transactions", {"producer_group": GROUP, "body_text": "x"}, 422, "topic"),
        ("/v1/transactions", _half(surprise=1), 422, "surprise"),
        ("/v1/transactions", _half(keys="not-a-list"), 422, "keys"),
        ("/v1/transactions", _half(check_immunity_seconds=-5), 400, "immunity"),
        ("/v1/transactions/batch", {"messages": []}, 400, "at least one"),
        (
            "/v1/transactions/tx/end",
            {"producer_group": GROUP, "resolution": "maybe"},
            422,
            "resolution",
        ),
        ("/v1/transactions/tx/end", {"resolution": "commit"}, 422, "producer_group"),
    ],
)
def test_bad_input_gets_a_clear_4xx(
    http: httpx.Client, db: psycopg.Connection, path: str, payload: dict, status: int, phrase: str
) -> None:
    response = http.post(path, json=payload)
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] and phrase in body["message"]
    assert db.execute("SELECT count(*) FROM messages").fetchone() == (0,)


def test_bodies_that_are_not_json_or_too_large_get_4xx(http: httpx.Client) -> None:
    garbage = http.post(
        "/v1/transactions",
        content=b"\xff\xfe not json",
        headers={"content-type": "application/json"},
    )
    assert garbage.status_code in (400, 422) and garbage.json()["message"]
    unknown_route = http.get("/v1/nothing-here")
    assert unknown_route.status_code == 404 and unknown_route.json()["error"] == "not_found"
    assert http.get("/v1/offsets/not-a-number").status_code == 422
    assert http.get("/v1/offsets/0").status_code == 422
    assert http.get("/v1/offsets/12345").status_code == 404
    too_big = base64.b64encode(b"x" * (4 * 1024 * 1024 + 1)).decode()
    response = http.post("/v1/transactions", json=_half(body_text=None, body_base64=too_big))
    assert response.status_code == 400 and "at most 4194304" in response.json()["message"]


def test_rejected_transactional_messages_get_403(database_url: str) -> None:
    settings = Settings(reject_transactional_messages=True, max_request_bytes=1024)
    with LiveServer(database_url, settings) as server, httpx.Client(base_url=server.url) as http:
        refused = http.post("/v1/transactions", json=_half())
        assert refused.status_code == 403
        assert refused.json()["error"] == "transactional_messages_rejected"
        assert (
            http.post("/v1/messages", json={"topic": TOPIC, "body_text": "ok"}).status_code == 201
        )
        huge = http.post("/v1/messages", json={"topic": TOPIC, "body_text": "x" * 2000})
        assert huge.status_code == 413 and "at most 1024" in huge.json()["message"]


def test_ending_a_batch_answers_each_request(http: httpx.Client, db: psycopg.Connection) -> None:
    sent = http.post("/v1/transactions/batch", json={"messages": [_half() for _ in range(4)]})
    a, b, c, d = (r["transaction_id"] for r in sent.json()["results"])
    http.post(f"/v1/transactions/{d}/end", json={"producer_group": GROUP, "resolution": "commit"})

    def item(tx: str, resolution: str, group: str = GROUP) -> dict:
        return {"transaction_id": tx, "producer_group": group, "resolution": resolution}

    answer = http.post(
        "/v1/transactions/end-batch",
        json={
            "requests": [
                item(a, "commit"),
                item(b, "rollback"),
                item(c, "commit", group="other"),
                item(d, "rollback"),
                item("f" * 32, "commit"),
            ]
        },
    )
    assert answer.status_code == 200
    results = answer.json()["results"]
    assert [(r["ok"], r["state"], r["error"]) for r in results] == [
        (True, "committed", None),
        (True, "rolled_back", None),
        (False, None, "producer_group_mismatch"),
        (False, None, "state_conflict"),
        (False, None, "not_found"),
    ]
    states = dict(db.execute("SELECT transaction_id, state FROM messages").fetchall())
    assert (states[a], states[b], states[c], states[d]) == (
        "committed",
        "rolled_back",
        "prepared",
        "committed",
    )
    twice = http.post(
        "/v1/transactions/end-batch", json={"requests": [item(c, "commit"), item(c, "rollback")]}
    )
    assert twice.status_code == 400 and "twice" in twice.json()["message"]


def test_hot_routes_check_what_fastapi_would(database_url: str) -> None:
    # The sending and ending routes skip FastAPI's dispatch (hot_routes.py);
    # they must still refuse what the declared routes refuse.
    settings = Settings(max_request_bytes=1024)
    with LiveServer(database_url, settings) as server, httpx.Client(base_url=server.url) as http:
        chunks = (b'{"topic": "t", "body_text": "' + b"x" * 600, b"x" * 600 + b'"}')
        streamed = http.post("/v1/messages", content=iter(chunks))  # chunked: no length
        assert streamed.status_code == 413 and "at most 1024" in streamed.json()["message"]

        long_id = "t" * 129
        ended = http.post(
            f"/v1/transactions/{long_id}/end",
            json={"producer_group": GROUP, "resolution": "commit"},
        )
        assert ended.status_code == 422
        assert "transaction_id" in ended.json()["message"]

        assert http.get("/v1/transactions").status_code == 405  # passed on to FastAPI
        sent = http.post("/v1/messages", json={"topic": TOPIC, "body_text": "ok"})
        assert sent.status_code == 201 and sent.json()["state"] == "committed"


# The default retention (72 h) less one default check interval (60 s).
LONGEST_IMMUNITY = 72 * 3600 - 60


def test_check_immunity_leaves_one_check_interval_before_expiry(
    http: httpx.Client, db: psycopg.Connection
) -> None:
    at_bound = http.post("/v1/transactions", json=_half(check_immunity_seconds=LONGEST_IMMUNITY))
    assert at_bound.status_code == 201, at_bound.text
    over = http.post("/v1/transactions", json=_half(check_immunity_seconds=LONGEST_IMMUNITY + 1))
    assert over.status_code == 400
    assert over.json()["error"] == "invalid_request"
    assert f"at most {LONGEST_IMMUNITY} s" in over.json()["message"]
    assert db.execute("SELECT count(*) FROM messages").fetchone() == (1,)


@pytest.mark.parametrize(
    ("value", "status", "immunity"),
    [("90", 201, 90), (str(LONGEST_IMMUNITY), 201, LONGEST_IMMUNITY), ("soon", 400, None)],
)
def test_the_check_immunity_property_is_the_messages_immunity(
    http: httpx.Client, db: psycopg.Connection, value: str, status: int, immunity: int | None
) -> None:
    properties = {"CHECK_IMMUNITY_TIME_IN_SECONDS": value}
    sent = http.post("/v1/transactions", json=_half(properties=properties))
    assert sent.status_code == status, sent.text
    if immunity is None:
        assert "CHECK_IMMUNITY_TIME_IN_SECONDS" in sent.json()["message"]
        return
    stored = http.get(f"/v1/transactions/{sent.json()['transaction_id']}").json()
    assert stored["check_immunity_seconds"] == immunity
    assert stored["properties"] == properties


def test_the_check_immunity_field_wins_over_the_property(http: httpx.Client) -> None:
    properties = {"CHECK_IMMUNITY_TIME_IN_SECONDS": str(LONGEST_IMMUNITY + 1)}
    sent = http.post(
        "/v1/transactions", json=_half(check_immunity_seconds=30, properties=properties)
    )
    assert sent.status_code == 201, sent.text
    stored = http.get(f"/v1/transactions/{sent.json()['transaction_id']}").json()
    assert stored["check_immunity_seconds"] == 30
