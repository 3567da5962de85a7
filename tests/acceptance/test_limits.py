"""Every size limit over HTTP, at its bound (accepted) and one over (a 4xx with a sentence)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from coordinator.config import Settings
from tests.conftest import LiveServer

TOPIC = "orders"
GROUP = "order-producers"
LIMITS = Settings(
    max_body_bytes=10,
    max_properties_bytes=8,
    max_batch_size=2,
    max_request_bytes=4096,
)


@pytest.fixture
def http(database_url: str) -> Iterator[httpx.Client]:
    with (
        LiveServer(database_url, LIMITS) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        yield client


def _half(body: str = "x", **fields: object) -> dict[str, object]:
    return {"topic": TOPIC, "producer_group": GROUP, "body_text": body, **fields}


def _refused(response: httpx.Response, status: int, sentence: str) -> None:
    assert response.status_code == status, response.text
    assert sentence in response.json()["message"]


def test_the_body_limit(http: httpx.Client) -> None:
    assert http.post("/v1/transactions", json=_half("x" * 10)).status_code == 201
    _refused(http.post("/v1/transactions", json=_half("x" * 11)), 400, "at most 10 are allowed")


def test_the_properties_limit(http: httpx.Client) -> None:
    at_bound = _half(properties={"abcd": "efgh"})  # 8 bytes of names and values
    assert http.post("/v1/transactions", json=at_bound).status_code == 201
    over = _half(properties={"abcd": "efghi"})
    _refused(http.post("/v1/transactions", json=over), 400, "at most 8 are allowed")


def test_the_batch_limit(http: httpx.Client) -> None:
    two = {"messages": [_half(), _half()]}
    sent = http.post("/v1/transactions/batch", json=two)
    assert sent.status_code == 200
    three = {"messages": [_half(), _half(), _half()]}
    _refused(http.post("/v1/transactions/batch", json=three), 400, "at most 2 messages")
    ends = [
        {"transaction_id": r["transaction_id"], "producer_group": GROUP, "resolution": "commit"}
        for r in sent.json()["results"]
    ]
    assert http.post("/v1/transactions/end-batch", json={"requests": ends}).status_code == 200
    too_many = {"requests": [*ends, {**ends[0], "transaction_id": "another"}]}
    _refused(http.post("/v1/transactions/end-batch", json=too_many), 400, "at most 2 requests")


def test_the_request_size_limit(http: httpx.Client) -> None:
    def padded(size: int) -> bytes:
        # A valid message, made `size` bytes long with JSON's own whitespace.
        message = json.dumps(_half()).encode()
        return message + b" " * (size - len(message))

    headers = {"content-type": "application/json"}
    assert http.post("/v1/transactions", content=padded(4096), headers=headers).status_code == 201
    over = http.post("/v1/transactions", content=padded(4097), headers=headers)
    _refused(over, 413, "4096")


@pytest.mark.parametrize(
    "path",
    [
        "/v1/consumer-groups/billing/ack/batch",
        "/v1/producers/order-producers/instances/i-1/heartbeat",
        "/v1/consumer-groups/billing/subscriptions/orders",
    ],
)
def test_a_chunked_body_over_the_limit_is_413_on_every_route(http: httpx.Client, path: str) -> None:
    def chunks() -> Iterator[bytes]:
        # Far more than the limit, in chunks: the server must stop reading early.
        yield b'{"receipt_handles": ["'
        for _ in range(2000):
            yield b"x" * 1024
        yield b'"]}'

    method = "PUT" if path.endswith("/orders") else "POST"
    headers = {"content-type": "application/json"}
    answer = http.request(method, path, content=chunks(), headers=headers)
    _refused(answer, 413, "at most 4096 bytes")
    assert answer.json()["error"] == "request_too_large"
