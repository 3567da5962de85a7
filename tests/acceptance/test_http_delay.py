"""Delay and timer messages, recall and trace context over HTTP."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from coordinator.config import Settings
from tests.conftest import LiveServer

TOPIC = "reminders"
GROUP = "billing"
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def http(database_url: str) -> Iterator[httpx.Client]:
    with (
        LiveServer(database_url, Settings(database_url=None)) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        yield client


def receive(http: httpx.Client, wait: float = 0) -> list[dict]:
    answer = http.post(f"/v1/consumer-groups/{GROUP}/receive", json={"wait_seconds": wait})
    assert answer.status_code == 200, answer.text
    return answer.json()["messages"]


def test_a_delayed_message_over_http(http: httpx.Client) -> None:
    assert http.put(f"/v1/consumer-groups/{GROUP}/subscriptions/{TOPIC}", json={}).is_success
    due = datetime.now(UTC) + timedelta(seconds=1.5)
    sent = http.post(
        "/v1/messages",
        json={
            "topic": TOPIC,
            "body_text": "r",
            "deliver_at": due.isoformat(),
            "trace_context": TRACE,
        },
    )
    assert sent.status_code == 201, sent.text
    assert sent.json()["recall_handle"]
    assert receive(http) == []
    (got,) = receive(http, wait=20)
    assert datetime.fromisoformat(got["deliver_at"]) == due
    assert got["trace_context"] == TRACE
    assert datetime.now(UTC) >= due
    looked_up = http.get(f"/v1/messages/{sent.json()['message_id']}").json()
    assert looked_up["trace_context"] == TRACE and looked_up["deliver_at"] is not None
    # delivered: too late to recall
    late = http.post("/v1/messages/recall", json={"recall_handle": sent.json()["recall_handle"]})
    assert late.status_code == 409 and "already delivered" in late.json()["message"]


def test_recall_over_http_and_its_refusals(http: httpx.Client) -> None:
    assert http.put(f"/v1/consumer-groups/{GROUP}/subscriptions/{TOPIC}", json={}).is_success
    sent = http.post("/v1/messages", json={"topic": TOPIC, "body_text": "r", "delay_seconds": 60})
    handle = sent.json()["recall_handle"]
    wrong = http.post("/v1/messages/recall", json={"recall_handle": handle, "topic": "other"})
    assert wrong.status_code == 404
    recalled = http.post("/v1/messages/recall", json={"recall_handle": handle})
    assert recalled.status_code == 200 and recalled.json()["changed"] is True
    again = http.post("/v1/messages/recall", json={"recall_handle": handle})
    assert again.status_code == 200 and again.json()["changed"] is False
    history = http.get(f"/v1/offsets/{sent.json()['offset']}").json()["history"]
    assert history[-1]["detail"] == "recalled" and history[-1]["source"] == "client"
    bad = http.post("/v1/messages/recall", json={"recall_handle": "nonsense"})
    assert bad.status_code == 400 and "recall handle" in bad.json()["message"]
    both = http.post(
        "/v1/messages",
        json={
            "topic": TOPIC,
            "body_text": "r",
            "delay_seconds": 1,
            "deliver_at": "2030-01-01T00:00:00Z",
        },
    )
    assert both.status_code == 422
    too_far = http.post(
        "/v1/messages", json={"topic": TOPIC, "body_text": "r", "delay_seconds": 4 * 24 * 3600}
    )
    assert too_far.status_code == 400 and "max_delay_seconds" in too_far.json()["message"]
    naive = http.post(
        "/v1/messages", json={"topic": TOPIC, "body_text": "r", "deliver_at": "2030-01-01T00:00:00"}
    )
    assert naive.status_code == 400 and "time zone" in naive.json()["message"]
    # A half message with a delivery time: its handle recalls it once committed.
    half = http.post(
        "/v1/transactions",
        json={"topic": TOPIC, "producer_group": "svc", "body_text": "h", "delay_seconds": 60},
    ).json()
    early = http.post("/v1/messages/recall", json={"recall_handle": half["recall_handle"]})
    assert early.status_code == 409 and "roll" in early.json()["message"]
    ended = http.post(
        f"/v1/transactions/{half['transaction_id']}/end",
        json={"producer_group": "svc", "resolution": "commit"},
    )
    assert ended.status_code == 200
    assert http.post(
        "/v1/messages/recall", json={"recall_handle": half["recall_handle"]}
    ).is_success
    assert receive(http) == []


def test_recall_needs_produce_permission_on_the_topic(
    database_url: str, issue_token: Callable[..., str]
) -> None:
    owner = issue_token("owner", produce_topics=(TOPIC,), producer_groups=("svc",))
    rival = issue_token("rival", produce_topics=("other",), producer_groups=("rivals",))
    with (
        LiveServer(database_url, Settings(database_url=None)) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        sent = http.post(
            "/v1/messages",
            json={"topic": TOPIC, "body_text": "r", "delay_seconds": 60},
            headers={"Authorization": f"Bearer {owner}"},
        )
        handle = sent.json()["recall_handle"]
        refused = http.post(
            "/v1/messages/recall",
            json={"recall_handle": handle},
            headers={"Authorization": f"Bearer {rival}"},
        )
        assert refused.status_code == 403
        allowed = http.post(
            "/v1/messages/recall",
            json={"recall_handle": handle},
            headers={"Authorization": f"Bearer {owner}"},
        )
        assert allowed.status_code == 200
