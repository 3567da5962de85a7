"""A request must arrive whole within request_read_timeout: trickled headers or bodies end in a 408.

Without the limit a client sending a byte now and then held its connection
(and a slot under max_connections) for as long as it liked.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterator

import httpx
import psycopg
import pytest

from coordinator.config import Settings
from tests.conftest import LiveServer

TIMEOUT = 1.0
# Time for the answer to arrive after the timeout, on a loaded machine.
SLACK = 4.0


@pytest.fixture
def server(database_url: str, settings: Settings) -> Iterator[LiveServer]:
    limited = settings.with_overrides(request_read_timeout_seconds=TIMEOUT)
    with LiveServer(database_url, limited) as live:
        yield live


def _connect(server: LiveServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT + SLACK)


def _until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    answer = b""
    deadline = time.monotonic() + TIMEOUT + SLACK
    while time.monotonic() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            return answer
        answer += chunk
    raise AssertionError(f"the server kept the connection open; it sent {answer!r}")


def _trickle(sock: socket.socket, data: bytes, seconds: float) -> None:
    """Sends `data` a byte at a time over `seconds`, stopping once the server closes."""
    pause = seconds / len(data)
    for byte in data:
        try:
            sock.sendall(bytes([byte]))
        except (BrokenPipeError, ConnectionResetError):
            return
        time.sleep(pause)


def _is_408(answer: bytes) -> bool:
    head, _, body = answer.partition(b"\r\n\r\n")
    return (
        head.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
        and b"connection: close" in head.lower()
        and json.loads(body)["error"] == "request_timeout"
    )


def _message_count(db: psycopg.Connection) -> int:
    (count,) = db.execute("SELECT count(*) FROM messages").fetchone()
    return count


def test_trickled_headers_are_answered_408_and_the_connection_closed(server: LiveServer) -> None:
    head = (
        b"POST /v1/transactions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n"
    )
    with _connect(server) as sock:
        started = time.monotonic()
        _trickle(sock, head * 3, seconds=TIMEOUT * 3)
        answer = _until_closed(sock)
    assert _is_408(answer), answer
    assert time.monotonic() - started < TIMEOUT * 3 + SLACK


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/transactions"),  # a hot route (coordinator/http/hot_routes.py)
        ("PUT", "/v1/consumer-groups/billing/subscriptions/orders"),  # a FastAPI route
    ],
)
def test_a_body_that_stops_arriving_is_answered_408_and_nothing_is_stored(
    server: LiveServer,
    db: psycopg.Connection,
    caplog: pytest.LogCaptureFixture,
    method: str,
    path: str,
) -> None:
    # What arrives is valid JSON (the missing part is padding): the request
    # must still not be acted on, since the client never finished sending it.
    body = (
        json.dumps(
            {"topic": "orders", "producer_group": "order-service", "body_text": "order 1"}
        ).encode()
        + b" " * 16
    )
    head = (
        f"{method} {path} HTTP/1.1\r\nhost: localhost\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    with caplog.at_level(logging.ERROR), _connect(server) as sock:
        sock.sendall(head + body[:-5])  # all but the last bytes; then nothing
        answer = _until_closed(sock)
    assert _is_408(answer), answer
    time.sleep(1.0)  # a request acted on anyway would be stored by now
    assert _message_count(db) == 0
    subscriptions = db.execute("SELECT count(*) FROM subscriptions").fetchone()
    assert subscriptions == (0,)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_a_connection_that_never_sends_a_request_is_closed(server: LiveServer) -> None:
    with _connect(server) as sock:
        _until_closed(sock)


def test_a_slow_request_that_arrives_in_time_and_a_long_poll_are_not_cut(
    server: LiveServer, db: psycopg.Connection
) -> None:
    body = json.dumps(
        {"topic": "orders", "producer_group": "order-service", "body_text": "order 1"}
    ).encode()
    head = (
        "POST /v1/transactions HTTP/1.1\r\nhost: localhost\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    with _connect(server) as sock:
        _trickle(sock, head + body, seconds=TIMEOUT / 2)
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 201 "), answer
    assert _message_count(db) == 1

    # The timeout is for receiving a request, not for answering it: a long
    # poll that waits longer than it is answered as usual.
    with httpx.Client(base_url=server.url, timeout=30) as http:
        subscribed = http.put("/v1/consumer-groups/billing/subscriptions/idle", json={})
        assert subscribed.status_code == 201, subscribed.text
        started = time.monotonic()
        polled = http.post(
            "/v1/consumer-groups/billing/receive",
            json={"topic": "idle", "wait_seconds": TIMEOUT * 2},
        )
    assert polled.status_code == 200, polled.text
    assert polled.json() == {"messages": []}
    assert time.monotonic() - started >= TIMEOUT * 2
