"""Strings PostgreSQL cannot store (lone UTF-16 surrogates) are a 4xx, never a 500.

JSON can spell one (`"\\ud800"`) and Python holds it, but it has no UTF-8
form: every string field that reaches the database is checked.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.conftest import LiveServer

SURROGATE = "a\ud800b"
GROUP = "order-producers"
HALF = {"topic": "orders", "producer_group": GROUP, "body_text": "x"}


def _post(http: httpx.Client, method: str, path: str, payload: dict[str, object]) -> httpx.Response:
    # json.dumps escapes the surrogate as \ud800, as a hostile client would send it
    content = json.dumps(payload).encode()
    headers = {"content-type": "application/json"}
    return http.request(method, path, content=content, headers=headers)


@pytest.mark.parametrize(
    ("method", "path", "payload"),
    [
        ("PUT", "/v1/consumer-groups/billing/subscriptions/orders", {"expression": SURROGATE}),
        ("POST", "/v1/transactions", {**HALF, "tags": SURROGATE}),
        ("POST", "/v1/transactions", {**HALF, "keys": [SURROGATE]}),
        ("POST", "/v1/transactions", {**HALF, "properties": {SURROGATE: "v"}}),
        ("POST", "/v1/transactions", {**HALF, "properties": {"k": SURROGATE}}),
        ("POST", "/v1/transactions", {**HALF, "message_group": SURROGATE}),
        ("POST", "/v1/transactions", {**HALF, "body_text": SURROGATE}),
        ("POST", "/v1/messages", {"topic": "orders", "body_text": "x", "tags": SURROGATE}),
        (
            "POST",
            f"/v1/producers/{GROUP}/instances/i-1/heartbeat",
            {"check_url": f"http://127.0.0.1/{SURROGATE}"},
        ),
    ],
)
def test_a_lone_surrogate_is_refused_with_a_sentence(
    live_server: LiveServer, method: str, path: str, payload: dict[str, object]
) -> None:
    with httpx.Client(base_url=live_server.url, timeout=10) as http:
        answer = _post(http, method, path, payload)
        assert answer.status_code in (400, 422), answer.text
        assert answer.json()["message"]
        assert http.get("/health").status_code == 200


@pytest.mark.parametrize("value", ["yes", "true", 1, 0, "1"])
def test_booleans_are_json_booleans_only(live_server: LiveServer, value: object) -> None:
    with httpx.Client(base_url=live_server.url, timeout=10) as http:
        sent = http.post("/v1/transactions", json=HALF).json()
        end = {"producer_group": GROUP, "resolution": "commit", "from_check": value}
        answer = http.post(f"/v1/transactions/{sent['transaction_id']}/end", json=end)
        assert answer.status_code == 422 and "from_check" in answer.json()["message"]
        subscribe = http.put(
            "/v1/consumer-groups/billing/subscriptions/orders", json={"fifo": value}
        )
        assert subscribe.status_code == 422 and "fifo" in subscribe.json()["message"]
        state = http.get(f"/v1/transactions/{sent['transaction_id']}").json()["state"]
        assert state == "prepared"
