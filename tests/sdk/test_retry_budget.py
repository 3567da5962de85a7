"""The SDK's retries are bounded by time: it rides out an outage shorter than
its budget (a database failover) and gives up once the budget is spent.

The outage is an HTTP server in front of a real coordinator: while it is
down it answers 503 database_unavailable itself, as the coordinator does
while PostgreSQL fails over; otherwise it passes each request on. Timings
are asserted only as generous bounds (a busy machine makes every wait
longer, never shorter), and the counts of attempts say the rest.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import psycopg
import pytest

from coordinator.client import (
    AsyncTransactionListener,
    AsyncTransactionProducer,
    Conflict,
    CoordinatorRequestError,
    CoordinatorUnavailable,
    InvalidRequest,
    LocalTransactionState,
    Message,
    NotFound,
    RateLimited,
    ReceivedMessage,
    RetryPolicy,
    SimpleConsumer,
    TransactionListener,
    TransactionProducer,
)
from coordinator.client._protocol import read_response
from coordinator.client._retry import DEFAULT_RETRY_SECONDS
from tests.conftest import LiveServer

GROUP = "retrying-producers"
TOPIC = "orders"

# status, JSON body, headers
Answer = tuple[int, dict[str, Any], dict[str, str]]
DATABASE_UNAVAILABLE: Answer = (
    503,
    {"error": "database_unavailable", "message": "PostgreSQL is away"},
    {"Retry-After": "1"},
)


@dataclass(frozen=True)
class Request:
    at: float  # time.monotonic() on arrival
    method: str
    path: str


class Outage:
    """A coordinator's address that is down while `answer` gives an answer:
    it answers that itself, and passes everything else on to `upstream`."""

    def __init__(self, upstream: str | None = None) -> None:
        self.upstream = upstream
        self.answer: Callable[[Request], Answer | None] = lambda _: None
        # Passed on, but answered 503 as if the connection broke after COMMIT.
        self.lose_answer: Callable[[Request], bool] = lambda _: False
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        outage = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                request = Request(time.monotonic(), self.command, self.path.split("?")[0])
                with outage._lock:
                    outage.requests.append(request)
                answer = outage.answer(request)
                if answer is None:
                    answer = outage._passed_on(self, body)
                    if outage.lose_answer(request):
                        answer = (503, DATABASE_UNAVAILABLE[1], {})
                status, content, headers = answer
                raw = json.dumps(content).encode()
                self.send_response(status)
                for name, value in {**headers, "content-type": "application/json"}.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = do_PUT = do_DELETE = _handle

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True  # a held answer must not hold up the test's end

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _passed_on(self, handler: BaseHTTPRequestHandler, body: bytes) -> Answer:
        assert self.upstream is not None, f"nothing behind the outage for {handler.path}"
        headers = {
            name: handler.headers[name]
            for name in ("content-type", "authorization")
            if name in handler.headers
        }
        answer = httpx.request(
            handler.command, self.upstream + handler.path, content=body, headers=headers, timeout=60
        )
        return answer.status_code, answer.json() if answer.content else {}, {}

    def down_for(self, seconds: float, answer: Answer = DATABASE_UNAVAILABLE) -> None:
        """Answer `answer` to every request for the next `seconds`."""
        until = time.monotonic() + seconds
        self.answer = lambda request: answer if request.at < until else None

    def sent(self, method: str, path_start: str) -> list[Request]:
        with self._lock:
            return [
                r for r in self.requests if r.method == method and r.path.startswith(path_start)
            ]

    def __enter__(self) -> Outage:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def outage(server: LiveServer) -> Iterator[Outage]:
    with Outage(server.url) as proxy:
        yield proxy


class Committing(TransactionListener):
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, msg: Message) -> LocalTransactionState:
        return LocalTransactionState.COMMIT


class AsyncCommitting(AsyncTransactionListener):
    async def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT

    async def check_local_transaction(self, msg: Message) -> LocalTransactionState:
        return LocalTransactionState.COMMIT


def _states(db: psycopg.Connection) -> list[tuple[str, str]]:
    return db.execute("SELECT message_id, state FROM messages ORDER BY message_id").fetchall()


def test_a_send_rides_out_an_outage_shorter_than_its_budget(
    outage: Outage, db: psycopg.Connection
) -> None:
    retry = RetryPolicy(retry_seconds=30, initial_delay=0.05, max_delay=0.2)
    with TransactionProducer(GROUP, Committing(), outage.url, retry=retry) as producer:
        outage.down_for(2.0)
        result = producer.send_message_in_transaction(Message(TOPIC, "order 1"))

    sends = outage.sent("POST", "/v1/transactions")
    assert len([s for s in sends if not s.path.endswith("/end")]) >= 2  # refused, then resent
    # One message, with the id minted before the first attempt, and committed.
    assert _states(db) == [(result.message_id, "committed")]


@pytest.mark.anyio
async def test_an_async_send_rides_out_an_outage_shorter_than_its_budget(
    outage: Outage, db: psycopg.Connection
) -> None:
    retry = RetryPolicy(retry_seconds=30, initial_delay=0.05, max_delay=0.2)
    async with AsyncTransactionProducer(
        GROUP, AsyncCommitting(), outage.url, retry=retry
    ) as producer:
        outage.down_for(2.0)
        result = await producer.send_message_in_transaction(Message(TOPIC, "order 1"))

    assert len(outage.sent("POST", "/v1/transactions")) >= 3  # refused, resent, ended
    assert _states(db) == [(result.message_id, "committed")]


def test_the_wait_between_attempts_honours_retry_after(outage: Outage) -> None:
    # The backoff alone would resend every 0.05 s or less: 40 times in 2 s.
    retry = RetryPolicy(retry_seconds=30, initial_delay=0.01, max_delay=0.05)
    with TransactionProducer(GROUP, Committing(), outage.url, retry=retry) as producer:
        outage.down_for(2.0)  # answering Retry-After: 1
        producer.send(Message(TOPIC, "order 1"))

    sends = outage.sent("POST", "/v1/messages")
    assert 2 <= len(sends) <= 4
    gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(sends)]
    assert min(gaps) >= 0.9


def test_a_call_gives_up_once_its_budget_is_spent() -> None:
    with Outage() as outage:
        outage.down_for(3600, (503, {"error": "database_unavailable", "message": "away"}, {}))
        retry = RetryPolicy(retry_seconds=1.5, initial_delay=0.05, max_delay=0.2)
        producer = TransactionProducer(GROUP, Committing(), outage.url, retry=retry)
        started = time.monotonic()
        with pytest.raises(CoordinatorUnavailable) as raised:
            producer.start()
        took = time.monotonic() - started

    attempts = len(outage.sent("POST", "/v1/producers/"))
    assert attempts >= 3
    message = str(raised.value)
    assert f"gave up after {attempts} attempts" in message
    assert "retry_seconds=1.5 spent" in message and "database_unavailable" in message
    # About the budget: it gives up rather than sleep past it, so a little before.
    assert 1.5 - 0.2 <= took < 1.5 + 10


def test_a_retry_after_beyond_the_budget_gives_up_at_once() -> None:
    with Outage() as outage:
        outage.down_for(3600, (503, {"error": "database_unavailable"}, {"Retry-After": "120"}))
        retry = RetryPolicy(retry_seconds=30)
        producer = TransactionProducer(GROUP, Committing(), outage.url, retry=retry)
        with pytest.raises(CoordinatorUnavailable) as raised:
            producer.start()

    assert len(outage.requests) == 1
    assert raised.value.retry_after == 120


def test_a_resend_waits_no_longer_than_the_budget_has_left() -> None:
    """The first attempt is refused at once; the resend hangs for 8 s. With a
    timeout of 10 s it would be answered; cut to the budget, it gives up."""

    def answer(request: Request) -> Answer:
        if len(outage.requests) > 1:
            time.sleep(8)
            return 200, {}, {}
        return DATABASE_UNAVAILABLE[0], DATABASE_UNAVAILABLE[1], {}

    with Outage() as outage:
        outage.answer = answer
        retry = RetryPolicy(retry_seconds=2, initial_delay=0.05, max_delay=0.2)
        producer = TransactionProducer(GROUP, Committing(), outage.url, retry=retry, timeout=10)
        started = time.monotonic()
        with pytest.raises(CoordinatorUnavailable, match="gave up after"):
            producer.start()
        took = time.monotonic() - started

    # At least one timed-out resend, each within the budget's end plus the 1 s floor.
    assert len(outage.requests) >= 2
    assert took < 7


@pytest.mark.parametrize(
    ("status", "code", "error"),
    [
        (400, "invalid_request", InvalidRequest),
        (404, "not_found", NotFound),
        (409, "state_conflict", Conflict),
        (429, "rate_limited", RateLimited),
    ],
)
def test_refusals_are_not_sent_again(
    status: int, code: str, error: type[CoordinatorRequestError]
) -> None:
    with Outage() as outage:
        outage.down_for(3600, (status, {"error": code, "message": "no"}, {"Retry-After": "1"}))
        producer = TransactionProducer(GROUP, Committing(), outage.url)
        with pytest.raises(error):
            producer.start()

    assert len(outage.requests) == 1


def test_a_real_refusal_is_not_sent_again(outage: Outage, db: psycopg.Connection) -> None:
    with (
        TransactionProducer(GROUP, Committing(), outage.url) as producer,
        pytest.raises(InvalidRequest, match="topic"),
    ):
        producer.send(Message("bad topic!", "x"))

    assert len(outage.sent("POST", "/v1/messages")) == 1


def test_a_receive_is_not_sent_again(outage: Outage) -> None:
    # A lost answer's messages come back after their invisible duration; the
    # caller's next receive is the retry.
    with SimpleConsumer("audit", {TOPIC: "*"}, outage.url, wait_seconds=0) as consumer:
        outage.down_for(3600)
        with pytest.raises(CoordinatorUnavailable):
            consumer.receive()

    assert len(outage.sent("POST", "/v1/consumer-groups/audit/receive")) == 1


def test_an_ack_whose_answer_was_lost_is_done_when_its_resend_finds_it_gone(
    outage: Outage, server: LiveServer, db: psycopg.Connection
) -> None:
    with SimpleConsumer("audit", {TOPIC: "*"}, outage.url) as consumer:
        with TransactionProducer(GROUP, Committing(), server.url) as producer:
            for n in (1, 2):
                producer.send(Message(TOPIC, f"order {n}"))
        received: list[ReceivedMessage] = []
        for _ in range(20):
            received += consumer.receive(wait_seconds=1)
            if len(received) == 2:
                break
        first, second = received

        lost: list[Request] = []

        def lose_the_first_ack(request: Request) -> bool:
            if request.path.endswith("/ack") and not lost:
                lost.append(request)
                return True
            return False

        outage.lose_answer = lose_the_first_ack
        consumer.ack(first)  # acked, answered 503, resent: 404 not_found
        assert len(lost) == 1

        with pytest.raises(NotFound):  # a first attempt's 404 is still an error
            consumer.ack(first)
        consumer.ack(second)

    assert len(outage.sent("POST", "/v1/consumer-groups/audit/ack")) == 4
    assert db.execute("SELECT count(*) FROM deliveries").fetchone() == (0,)


def test_shutdown_does_not_wait_out_the_budget(outage: Outage) -> None:
    producer = TransactionProducer(
        GROUP, Committing(), outage.url, heartbeat_interval=0.1, check_wait_seconds=0.5
    ).start()  # with the default budget, far longer than this test
    outage.down_for(3600)
    time.sleep(0.5)  # the heartbeats fail and are being retried
    started = time.monotonic()
    producer.shutdown()

    assert time.monotonic() - started < DEFAULT_RETRY_SECONDS / 4


@pytest.mark.anyio
async def test_an_async_shutdown_does_not_wait_out_the_budget(outage: Outage) -> None:
    producer = await AsyncTransactionProducer(
        GROUP, AsyncCommitting(), outage.url, heartbeat_interval=0.1, check_wait_seconds=0.5
    ).start()
    outage.down_for(3600)
    await asyncio.sleep(0.5)
    started = time.monotonic()
    await producer.shutdown()

    assert time.monotonic() - started < DEFAULT_RETRY_SECONDS / 4


def test_the_deprecated_attempts_still_cap_the_attempts_and_warn() -> None:
    with pytest.warns(DeprecationWarning, match="retry_seconds") as warned:
        retry = RetryPolicy(attempts=3, initial_delay=0.01)
    assert warned[0].filename == __file__  # points at the caller's line
    with pytest.warns(DeprecationWarning):  # the positional form keeps its meaning
        assert RetryPolicy(3, 0.01) == retry

    with Outage() as outage:
        outage.down_for(3600)
        producer = TransactionProducer(GROUP, Committing(), outage.url, retry=retry)
        with pytest.raises(CoordinatorUnavailable, match="gave up after 3 attempts"):
            producer.start()

    assert len(outage.requests) == 3


def test_the_default_budget_outlasts_a_failover_and_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        policy = RetryPolicy()
    # Patroni's defaults take writes again ~30 s after the primary dies, and a
    # request may wait database_deadline_seconds (5 s) for its 503.
    assert policy.retry_seconds == DEFAULT_RETRY_SECONDS >= 30 + 5
    assert policy.attempts is None
    with pytest.raises(ValueError, match="retry_seconds"):
        RetryPolicy(retry_seconds=-1)


def test_retry_after_is_read_as_seconds_or_as_a_date() -> None:
    def read(value: str) -> float | None:
        response = httpx.Response(503, headers={"retry-after": value}, json={})
        with pytest.raises(CoordinatorUnavailable) as raised:
            read_response(response)
        return raised.value.retry_after

    assert read("1") == 1.0
    in_ten = format_datetime(datetime.now(UTC) + timedelta(seconds=10), usegmt=True)
    assert 5 < (read(in_ten) or 0) <= 10
    assert read("soon") is None and read("nan") is None
