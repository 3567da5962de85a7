"""PostgreSQL stopped under load and started again, with the coordinator left running.

What must hold while it is away: every request is answered within a bounded
time, either as usual or with a JSON 503 `database_unavailable` (never a
hang, never a 500), and /health says 503. Once it is back: requests succeed
again within seconds, without restarting the coordinator; nothing answered
2xx is lost; half messages whose end was lost are resolved by the check-back
scheduler, once each; consumers receive every committed message exactly once.

The test starts a Postgres of its own (stopping the suite's shared one would
break the other tests) and serves the coordinator on a loopback port.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx
import psycopg
import pytest

from coordinator.config import Settings
from coordinator.core.ids import new_message_id
from tests.conftest import LiveServer
from tests.own_postgres import OwnPostgres, own_postgres

pytestmark = pytest.mark.slow

TOPIC = "orders"
IDLE_TOPIC = "idle"  # nothing is ever sent to it: a receive on it only waits
PRODUCERS = "order-service"
CONSUMERS = "billing"
POOL_TIMEOUT = 2.0
DEADLINE = 3.0
# A request, its wait in a group-commit queue included, is answered within
# database_deadline_seconds; plus slack for a loaded machine. Before the
# deadline a request could queue behind batches each waiting POOL_TIMEOUT,
# and answers came after 10 to 13 s.
ANSWER_BOUND = DEADLINE + 3.0
# After Postgres is back, a request must succeed within this long. The pool's
# exponential reconnection backoff kept requests failing 7-8 s after a 20 s
# outage; slack for a loaded machine included.
RECOVERY_BOUND = 5.0
OUTAGES = (4.0, 20.0)


@dataclass(frozen=True)
class Answer:
    kind: str  # prepare, end, health, long_poll
    status: int  # 0: no HTTP answer (the connection failed)
    error: str | None
    sent_at: float
    answered_at: float
    detail: str | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass
class Record:
    """What the load saw, shared by its threads."""

    answers: list[Answer] = field(default_factory=list)
    # message id -> the resolution its producer's local transaction decided
    truth: dict[str, str] = field(default_factory=dict)
    prepared: set[str] = field(default_factory=set)  # answered 2xx
    ended: dict[str, str] = field(default_factory=dict)  # answered 2xx: id -> resolution
    checks_answered: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, kind: str, sent_at: float, response: httpx.Response | None) -> Answer:
        error = detail = None
        if response is not None and response.status_code >= 400:
            try:
                error = response.json().get("error")
                detail = response.json().get("message")
            except ValueError:
                error = f"not JSON: {response.text[:80]!r}"
        answer = Answer(
            kind,
            response.status_code if response is not None else 0,
            error,
            sent_at,
            time.monotonic(),
            detail,
        )
        with self.lock:
            self.answers.append(answer)
        return answer


def _post(client: httpx.Client, path: str, body: dict) -> tuple[float, httpx.Response | None]:
    sent_at = time.monotonic()
    try:
        return sent_at, client.post(path, json=body)
    except httpx.TransportError:
        return sent_at, None


def _producer(base_url: str, record: Record, stop: threading.Event, worker: int) -> None:
    with httpx.Client(base_url=base_url, timeout=60) as client:
        number = 0
        while not stop.is_set():
            number += 1
            message_id = new_message_id()
            resolution = "rollback" if number % 4 == 0 else "commit"
            with record.lock:
                record.truth[message_id] = resolution
            sent_at, response = _post(
                client,
                "/v1/transactions",
                {
                    "topic": TOPIC,
                    "producer_group": PRODUCERS,
                    "message_id": message_id,
                    "body_text": f"order {worker}-{number}",
                },
            )
            if not record.answer("prepare", sent_at, response).ok:
                time.sleep(0.05)
                continue
            assert response is not None
            with record.lock:
                record.prepared.add(message_id)
            transaction_id = response.json()["transaction_id"]
            sent_at, response = _post(
                client,
                f"/v1/transactions/{transaction_id}/end",
                {"producer_group": PRODUCERS, "resolution": resolution},
            )
            # An end that is not answered 2xx is left to the check-back, as
            # a producer that gave up would.
            if record.answer("end", sent_at, response).ok:
                with record.lock:
                    record.ended[message_id] = resolution


def _checker(base_url: str, record: Record, stop: threading.Event) -> None:
    """A producer instance answering check-backs from the local truth."""
    path = f"/v1/producers/{PRODUCERS}/instances/checker/checks"
    with httpx.Client(base_url=base_url, timeout=60) as client:
        while not stop.is_set():
            try:
                response = client.get(path, params={"wait_seconds": 1})
            except httpx.TransportError:
                time.sleep(0.2)
                continue
            if response.status_code != 200:
                time.sleep(0.2)  # Postgres away: the door said so; ask again
                continue
            for check in response.json()["checks"]:
                with record.lock:
                    resolution = record.truth[check["message_id"]]
                try:
                    answered = client.post(
                        f"/v1/transactions/{check['transaction_id']}/end",
                        json={
                            "producer_group": PRODUCERS,
                            "resolution": resolution,
                            "from_check": True,
                        },
                    )
                except httpx.TransportError:
                    continue
                if answered.status_code == 200:
                    with record.lock:
                        record.checks_answered += 1


@dataclass
class Load:
    record: Record
    producers_stop: threading.Event
    checker_stop: threading.Event
    producers: list[threading.Thread]
    checker: threading.Thread

    def stop_producers(self) -> None:
        _joined(self.producers_stop, self.producers)

    def stop(self) -> None:
        _joined(self.producers_stop, self.producers)
        _joined(self.checker_stop, [self.checker])


def _joined(stop: threading.Event, threads: list[threading.Thread]) -> None:
    stop.set()
    for thread in threads:
        thread.join(timeout=90)
    assert not any(t.is_alive() for t in threads), "a load thread did not stop"


@pytest.fixture
def postgres() -> Iterator[OwnPostgres]:
    with own_postgres() as server:
        yield server


def _running_load(base_url: str, producers: int) -> Load:
    record, producers_stop, checker_stop = Record(), threading.Event(), threading.Event()
    threads = [
        threading.Thread(target=_producer, args=(base_url, record, producers_stop, n), daemon=True)
        for n in range(producers)
    ]
    checker = threading.Thread(target=_checker, args=(base_url, record, checker_stop), daemon=True)
    for thread in [*threads, checker]:
        thread.start()
    return Load(record, producers_stop, checker_stop, threads, checker)


def _abandoned_half_messages(http: httpx.Client, record: Record, count: int) -> set[str]:
    """Half messages whose producer never ends them: only a check-back can."""
    abandoned = set()
    for number in range(count):
        message_id = new_message_id()
        with record.lock:
            record.truth[message_id] = "rollback" if number % 2 else "commit"
        response = http.post(
            "/v1/transactions",
            json={
                "topic": TOPIC,
                "producer_group": PRODUCERS,
                "message_id": message_id,
                "body_text": f"abandoned {number}",
            },
        )
        assert response.status_code == 201, response.text
        abandoned.add(message_id)
    with record.lock:
        record.prepared |= abandoned
    return abandoned


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if condition():
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout} s")


def _oks_since(record: Record, since: float) -> int:
    with record.lock:
        return sum(1 for a in record.answers if a.ok and a.answered_at >= since)


def _long_poll(base_url: str, record: Record) -> None:
    with httpx.Client(base_url=base_url, timeout=60) as client:
        sent_at, response = _post(
            client,
            f"/v1/consumer-groups/{CONSUMERS}/receive",
            {"topic": IDLE_TOPIC, "wait_seconds": 30, "max_messages": 1},
        )
        record.answer("long_poll", sent_at, response)


def test_postgres_stopped_under_load_gets_503s_then_recovers_and_loses_nothing(
    postgres: OwnPostgres,
) -> None:
    url = postgres.migrated_database("coordinator")
    settings = Settings(
        database_url=None,
        pool_timeout_seconds=POOL_TIMEOUT,
        database_deadline_seconds=DEADLINE,
        transaction_timeout_seconds=3,
        check_interval_seconds=1,
        check_scan_interval_seconds=0.5,
        check_poll_fallback_seconds=0.5,
    )
    health_during_outages: list[Answer] = []
    recoveries: list[float] = []
    recovered_at: list[float] = []
    stopped_at: list[float] = []
    with LiveServer(url, settings) as server, httpx.Client(base_url=server.url) as http:
        for topic in (TOPIC, IDLE_TOPIC):
            subscribed = http.put(f"/v1/consumer-groups/{CONSUMERS}/subscriptions/{topic}", json={})
            assert subscribed.status_code == 201, subscribed.text
        load = _running_load(server.url, producers=6)
        try:
            _wait_for(lambda: _oks_since(load.record, 0) >= 50, 60, "the load got going")
            # They come due (transaction timeout 3 s) while Postgres is away.
            abandoned = _abandoned_half_messages(http, load.record, 6)
            for outage in OUTAGES:
                poll = threading.Thread(target=_long_poll, args=(server.url, load.record))
                poll.start()
                time.sleep(0.5)  # the long poll is waiting when Postgres goes
                stopped_at.append(time.monotonic())
                postgres.stop()
                away_until = time.monotonic() + outage
                while time.monotonic() < away_until:
                    sent_at = time.monotonic()
                    health = http.get("/health", timeout=60)
                    health_during_outages.append(load.record.answer("health", sent_at, health))
                    time.sleep(1)
                postgres.start()
                back_at = time.monotonic()
                recoveries.append(
                    _wait_for(
                        lambda since=back_at: _oks_since(load.record, since) > 0,
                        60,
                        "a request succeeded after Postgres came back",
                    )
                )
                recovered_at.append(back_at + recoveries[-1])
                poll.join(timeout=60)
                assert not poll.is_alive()
                _wait_for(
                    lambda: http.get("/health").status_code == 200, 30, "/health said 200 again"
                )
                time.sleep(2)  # load runs on a healthy database between outages
            load.stop_producers()
            # Everything left prepared (its end was refused or lost, or
            # never sent) is resolved by the check-back scheduler, from the
            # producer's truth.
            _wait_for(lambda: _prepared_count(url) == 0, 90, "every half message resolved")
            delivered = _drain(http)
        finally:
            load.stop()

        record = load.record
        failures = [a for a in record.answers if not a.ok and a.kind != "health"]
        # The outages were seen, and answered as they should be.
        assert any(a.kind in ("prepare", "end") for a in failures)
        assert {(a.status, a.error) for a in failures} == {(503, "database_unavailable")}, [
            a for a in failures if (a.status, a.error) != (503, "database_unavailable")
        ][:5]
        slowest = max(record.answers, key=lambda a: a.answered_at - a.sent_at)
        assert slowest.answered_at - slowest.sent_at <= ANSWER_BOUND, slowest
        assert health_during_outages
        assert all(a.status == 503 for a in health_during_outages), health_during_outages
        long_polls = [a for a in record.answers if a.kind == "long_poll"]
        assert len(long_polls) == len(OUTAGES)
        assert all(a.status in (200, 503) for a in long_polls), long_polls
        assert all(a.answered_at - a.sent_at <= ANSWER_BOUND + 1 for a in long_polls), long_polls
        assert all(seconds <= RECOVERY_BOUND for seconds in recoveries), recoveries
        # Once one request succeeds again, the rest do too until the next
        # outage: connections the restart broke are not handed out to fail
        # a request each.
        healthy = list(zip(recovered_at, [*stopped_at[1:], float("inf")], strict=True))
        late = [
            a for a in failures for start, end in healthy if start + 0.5 <= a.sent_at < end - 0.5
        ]
        assert not late, late[:5]

    stored = _stored(url)
    assert record.prepared <= set(stored), "a half message answered 2xx was lost"
    for message_id, resolution in record.ended.items():
        assert stored[message_id][0] == _STATE[resolution], message_id
    for message_id, (state, resolutions) in stored.items():
        # Resolved as its producer decided, once: a check-back dispatched
        # twice, or an end applied twice, would show a second resolution.
        assert state == _STATE[record.truth[message_id]], message_id
        assert resolutions == 1, (message_id, resolutions)
    committed = {m for m, (state, _) in stored.items() if state == "committed"}
    assert sorted(delivered) == sorted(committed), "each commit delivered exactly once"
    by_check = _resolved_by_check(url)
    assert abandoned <= by_check
    assert set(stored) - set(record.ended) <= by_check, "resolved by neither producer nor check"


_STATE = {"commit": "committed", "rollback": "rolled_back"}


def _prepared_count(url: str) -> int:
    with psycopg.connect(url) as conn:
        (count,) = conn.execute("SELECT count(*) FROM messages WHERE state = 'prepared'").fetchone()
    return count


def _resolved_by_check(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT message_id FROM messages WHERE resolution_source = 'check'"
        ).fetchall()
    return {message_id for (message_id,) in rows}


def _stored(url: str) -> dict[str, tuple[str, int]]:
    """message id -> (state, how many times the history shows it resolved)."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT m.message_id, m.state, "
            "count(h.id) FILTER (WHERE h.to_state IN ('committed', 'rolled_back')) "
            "FROM messages m LEFT JOIN message_history h ON h.message_offset = m.id "
            "WHERE m.topic = %s GROUP BY m.message_id, m.state",
            (TOPIC,),
        ).fetchall()
    return {message_id: (state, resolutions) for message_id, state, resolutions in rows}


def _drain(http: httpx.Client) -> list[str]:
    """Every message the consumer group receives, acked as it comes; bounded."""
    received: list[str] = []
    empty_rounds = 0
    deadline = time.monotonic() + 90
    while empty_rounds < 2 and time.monotonic() < deadline:
        response = http.post(
            f"/v1/consumer-groups/{CONSUMERS}/receive",
            json={"topic": TOPIC, "max_messages": 100, "invisible_seconds": 300, "wait_seconds": 1},
        )
        assert response.status_code == 200, response.text
        messages = response.json()["messages"]
        empty_rounds = 0 if messages else empty_rounds + 1
        for message in messages:
            received.append(message["message_id"])
            acked = http.post(
                f"/v1/consumer-groups/{CONSUMERS}/ack",
                json={"receipt_handle": message["receipt_handle"]},
            )
            assert acked.status_code == 200, acked.text
    return received


def test_an_idle_coordinator_answers_the_first_requests_after_a_postgres_restart(
    postgres: OwnPostgres,
) -> None:
    """Its pooled connections broke with the restart; none of them fails a request."""
    url = postgres.migrated_database("coordinator")
    settings = Settings(
        database_url=None,
        pool_min_size=4,
        pool_timeout_seconds=POOL_TIMEOUT,
        check_scheduler_enabled=False,  # nothing uses the pool while Postgres is away
    )
    with LiveServer(url, settings) as server, httpx.Client(base_url=server.url) as http:
        postgres.stop()
        time.sleep(1.5)  # the listener notices, and fails to reconnect at least once
        postgres.start()
        _wait_for(lambda: _accepts_connections(url), 30, "Postgres accepted connections")
        answers = [
            http.post(
                "/v1/transactions",
                json={"topic": TOPIC, "producer_group": PRODUCERS, "body_text": f"order {n}"},
            )
            for n in range(6)
        ]
    assert [a.status_code for a in answers] == [201] * 6, [a.text for a in answers]


def _accepts_connections(url: str) -> bool:
    try:
        psycopg.connect(url, connect_timeout=2).close()
    except psycopg.OperationalError:
        return False
    return True


FROZEN_SECONDS = 10.0


def test_a_frozen_postgres_is_answered_503_at_the_deadline_then_served_again_once_it_thaws(
    postgres: OwnPostgres,
) -> None:
    """SIGSTOP, as a hung machine or a partition: nothing refuses, nothing answers.

    Before the deadline a request on a connection to the frozen server waited
    for as long as the server was frozen.
    """
    url = postgres.migrated_database("frozen")
    settings = Settings(
        database_url=None,
        pool_timeout_seconds=POOL_TIMEOUT,
        database_deadline_seconds=DEADLINE,
        check_scheduler_enabled=False,
    )
    with LiveServer(url, settings) as server:
        load = _running_load(server.url, producers=4)
        try:
            _wait_for(lambda: _oks_since(load.record, 0) >= 30, 60, "the load got going")
            frozen_at = time.monotonic()
            with postgres.frozen():
                time.sleep(FROZEN_SECONDS)
            thawed_at = time.monotonic()
            _wait_for(
                lambda: _oks_since(load.record, thawed_at) > 0, 30, "a request succeeded again"
            )
            load.stop_producers()
        finally:
            load.stop()
    record = load.record
    during = [a for a in record.answers if frozen_at <= a.sent_at < thawed_at - ANSWER_BOUND]
    assert during, "no request was sent while the server was frozen"
    failures = [a for a in during if not a.ok]
    assert failures, "the frozen server answered"
    assert {(a.status, a.error) for a in failures} == {(503, "database_unavailable")}, failures[:5]
    slowest = max(record.answers, key=lambda a: a.answered_at - a.sent_at)
    assert slowest.answered_at - slowest.sent_at <= ANSWER_BOUND, slowest
    stored = _stored(url)
    assert record.prepared <= set(stored), "a half message answered 2xx was lost"
    for message_id, resolution in record.ended.items():
        assert stored[message_id][0] == _STATE[resolution], message_id
