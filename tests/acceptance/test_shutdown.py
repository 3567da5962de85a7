"""`coordinator serve` stops gracefully on SIGTERM, under load, in every way it runs.

What a stop must do: refuse new work, answer the long polls that wait
(HTTP receives and check-request polls, gRPC ReceiveMessage, Telemetry
streams) at once with an empty answer, finish the requests in flight, close
the pool and the embedded PostgreSQL cleanly, exit 0, and leave no process
behind. Whatever was acknowledged (answered 2xx) before is in the database.

Timings are measured and printed, never asserted beyond generous bounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import psutil
import psycopg
import pytest
from rocketmq.grpc_protocol import service_pb2_grpc

from bench.server import free_port
from tests.grpc_door import code, metadata, producer_settings, receive_request
from tests.processes import (
    ServeProcess,
    coordinator_serve,
    embedded_data_dir,
    exit_status,
    exited_within,
    live_processes,
    postmasters_of,
)

pytestmark = pytest.mark.slow

PRODUCERS = 16
CONSUMERS = 4
IDLE_POLLS = 4
# The waiting polls ask for the longest wait; answered within PROMPT_SECONDS
# of the SIGTERM, they were ended by the stop, not by their wait running out.
LONG_POLL_SECONDS = 60.0
PROMPT_SECONDS = 15.0
# How long a stop may take before the test fails (it takes about a second).
STOP_BOUND_SECONDS = 45.0
LOAD_SECONDS = 3.0

BUSY_TOPIC, BUSY_GROUP, PRODUCER_GROUP = "orders", "billing", "order-svc"
QUIET_TOPIC, QUIET_GROUP = "quiet", "idle-readers"


@dataclass
class Answer:
    """What a waiting poll got: its HTTP status or gRPC status, its content, when."""

    status: Any
    content: Any
    at: float


@dataclass
class Ledger:
    """What the server acknowledged (2xx) to the load, and what went wrong."""

    prepared: set[str] = field(default_factory=set)
    committed: set[str] = field(default_factory=set)
    acked_offsets: set[int] = field(default_factory=set)
    answered_after_stop: int = 0  # 2xx answers that came after the SIGTERM
    refused: int = 0  # transport errors: the server closed or no longer listens
    server_errors: list[str] = field(default_factory=list)  # 5xx: never on a clean stop
    stop_sent_at: float | None = None

    def record(self, response: httpx.Response) -> bool:
        if response.status_code >= 500:
            self.server_errors.append(f"{response.request.url.path}: {response.text}")
        ok = response.is_success
        if ok and self.stop_sent_at is not None:
            self.answered_after_stop += 1
        return ok


async def _call(ledger: Ledger, request: Awaitable[httpx.Response]) -> httpx.Response | None:
    try:
        return await request
    except httpx.TransportError:
        ledger.refused += 1
        await asyncio.sleep(0.05)
        return None


async def _produce(url: str, ledger: Ledger, index: int, done: asyncio.Event) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        n = 0
        while not done.is_set():
            n += 1
            body = {
                "topic": BUSY_TOPIC,
                "producer_group": PRODUCER_GROUP,
                "body_text": f"producer {index} order {n}",
            }
            sent = await _call(ledger, client.post("/v1/transactions", json=body))
            if sent is None or not ledger.record(sent):
                continue
            transaction_id = sent.json()["transaction_id"]
            ledger.prepared.add(transaction_id)
            end = {"producer_group": PRODUCER_GROUP, "resolution": "commit"}
            ended = await _call(
                ledger,
                client.post(f"/v1/transactions/{transaction_id}/end", json=end),
            )
            if ended is not None and ledger.record(ended):
                ledger.committed.add(transaction_id)


async def _consume(url: str, ledger: Ledger, done: asyncio.Event) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        while not done.is_set():
            batch = await _call(
                ledger,
                client.post(
                    f"/v1/consumer-groups/{BUSY_GROUP}/receive",
                    json={"max_messages": 16, "invisible_seconds": 30, "wait_seconds": 2},
                ),
            )
            if batch is None or not ledger.record(batch):
                continue
            for message in batch.json()["messages"]:
                acked = await _call(
                    ledger,
                    client.post(
                        f"/v1/consumer-groups/{BUSY_GROUP}/ack",
                        json={"receipt_handle": message["receipt_handle"]},
                    ),
                )
                if acked is not None and ledger.record(acked):
                    ledger.acked_offsets.add(message["offset"])


async def _wait_http(request: Awaitable[httpx.Response]) -> Answer:
    try:
        response = await request
    except httpx.TransportError as error:
        return Answer(f"{type(error).__name__}: {error}", None, time.monotonic())
    return Answer(response.status_code, response.json(), time.monotonic())


async def _idle_receive(client: httpx.AsyncClient) -> Answer:
    return await _wait_http(
        client.post(
            f"/v1/consumer-groups/{QUIET_GROUP}/receive",
            json={"max_messages": 16, "invisible_seconds": 30, "wait_seconds": LONG_POLL_SECONDS},
        )
    )


async def _idle_check_poll(client: httpx.AsyncClient) -> Answer:
    return await _wait_http(
        client.get(
            "/v1/producers/quiet-producers/instances/instance-1/checks",
            params={"wait_seconds": LONG_POLL_SECONDS},
        )
    )


async def _grpc_receive(channel: grpc.aio.Channel) -> Answer:
    stub = service_pb2_grpc.MessagingServiceStub(channel)
    call = stub.ReceiveMessage(
        receive_request(QUIET_GROUP, QUIET_TOPIC, wait=LONG_POLL_SECONDS),
        metadata=metadata(client_id="shutdown-consumer@1"),
        timeout=LONG_POLL_SECONDS + 30,
    )
    responses = []
    try:
        async for response in call:
            responses.append(response)
    except grpc.aio.AioRpcError as error:
        return Answer(error.code(), error.details(), time.monotonic())
    statuses = [r.status.code for r in responses if r.WhichOneof("content") == "status"]
    messages = [r for r in responses if r.WhichOneof("content") == "message"]
    return Answer(statuses, messages, time.monotonic())


async def _telemetry_stream(channel: grpc.aio.Channel, opened: asyncio.Event) -> Answer:
    """A producer's Telemetry stream, open until the server ends it."""
    stub = service_pb2_grpc.MessagingServiceStub(channel)
    call = stub.Telemetry(metadata=metadata(client_id="shutdown-producer@1"))
    await call.write(producer_settings("quiet-producers"))
    await call.read()  # the settings answered: the stream is open and registered
    opened.set()
    while True:
        command = await call.read()
        if command is grpc.aio.EOF:
            break
    return Answer(await call.code(), None, time.monotonic())


@dataclass
class Stop:
    """A SIGTERMed coordinator: how long it took, how it exited, what it left."""

    seconds: float
    exited: bool
    status: int | None
    left_running: list[str]  # command lines


async def _sigterm(server: ServeProcess, ledger: Ledger) -> Stop:
    family = [p.pid for p in psutil.Process(server.process.pid).children(recursive=True)]
    ledger.stop_sent_at = sent = time.monotonic()
    os.kill(server.process.pid, signal.SIGTERM)
    loop = asyncio.get_running_loop()
    exited = await loop.run_in_executor(None, exited_within, server.process, STOP_BOUND_SECONDS)
    seconds = time.monotonic() - sent
    # Helpers of the leader (multiprocessing's resource tracker) see it gone
    # only once it has exited: give them a moment.
    deadline = time.monotonic() + 10
    while live_processes(family) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    left = []
    for pid in live_processes(family):
        with contextlib.suppress(psutil.NoSuchProcess):
            left.append(" ".join(psutil.Process(pid).cmdline()))
    return Stop(seconds, exited, exit_status(server.process), left)


async def _stop_under_load(
    server: ServeProcess, grpc_port: int | None
) -> tuple[Ledger, Stop, dict[str, list[Answer]]]:
    ledger = Ledger()
    done = asyncio.Event()
    async with httpx.AsyncClient(base_url=server.url, timeout=LONG_POLL_SECONDS + 30) as client:
        for group, topic in ((BUSY_GROUP, BUSY_TOPIC), (QUIET_GROUP, QUIET_TOPIC)):
            subscribed = await client.put(
                f"/v1/consumer-groups/{group}/subscriptions/{topic}", json={"expression": "*"}
            )
            assert subscribed.is_success, subscribed.text
        load = [
            *(asyncio.create_task(_produce(server.url, ledger, i, done)) for i in range(PRODUCERS)),
            *(asyncio.create_task(_consume(server.url, ledger, done)) for _ in range(CONSUMERS)),
        ]
        waiting: dict[str, list[asyncio.Task[Answer]]] = {
            "HTTP receive": [asyncio.create_task(_idle_receive(client)) for _ in range(IDLE_POLLS)],
            "HTTP check poll": [asyncio.create_task(_idle_check_poll(client))],
        }
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") if grpc_port else None
        try:
            if channel is not None:
                opened = asyncio.Event()
                waiting["gRPC ReceiveMessage"] = [asyncio.create_task(_grpc_receive(channel))]
                waiting["gRPC Telemetry"] = [
                    asyncio.create_task(_telemetry_stream(channel, opened))
                ]
                await asyncio.wait_for(opened.wait(), 30)
            await asyncio.sleep(LOAD_SECONDS)
            assert not any(task.done() for tasks in waiting.values() for task in tasks), (
                "a long poll ended before the stop"
            )
            stop = await _sigterm(server, ledger)
            done.set()
            await asyncio.gather(*load)
            answers = {name: list(await asyncio.gather(*tasks)) for name, tasks in waiting.items()}
        finally:
            done.set()
            if channel is not None:
                await channel.close()
            for task in load:
                task.cancel()
    return ledger, stop, answers


def _assert_nothing_acknowledged_is_lost(database_url: str, ledger: Ledger) -> None:
    with psycopg.connect(database_url, autocommit=True) as db:
        states = dict(
            db.execute(
                "SELECT transaction_id, state FROM messages WHERE transaction_id = ANY(%s)",
                (list(ledger.prepared),),
            ).fetchall()
        )
        still_delivered = db.execute(
            "SELECT count(*) FROM deliveries WHERE consumer_group = %s "
            "AND message_offset = ANY(%s)",
            (BUSY_GROUP, list(ledger.acked_offsets)),
        ).fetchone()
    assert set(states) == ledger.prepared, "an acknowledged half message is missing"
    assert {t for t, state in states.items() if state == "committed"} >= ledger.committed
    assert still_delivered == (0,), "an acknowledged ack was undone"


def _assert_waiting_polls_answered_empty_at_once(
    answers: dict[str, list[Answer]], stop_sent_at: float, grpc_on: bool
) -> None:
    expected_empty = {
        "HTTP receive": (200, {"messages": []}),
        "HTTP check poll": (200, {"checks": []}),
        "gRPC ReceiveMessage": ([code("MESSAGE_NOT_FOUND")], []),
        "gRPC Telemetry": (grpc.StatusCode.OK, None),
    }
    assert set(answers) == {"HTTP receive", "HTTP check poll"} | (
        {"gRPC ReceiveMessage", "gRPC Telemetry"} if grpc_on else set()
    )
    for name, got in answers.items():
        for answer in got:
            assert (answer.status, answer.content) == expected_empty[name], name
            assert answer.at - stop_sent_at < PROMPT_SECONDS, (name, answer.at - stop_sent_at)


def _report(variant: str, ledger: Ledger, stop: Stop, answers: dict[str, list[Answer]]) -> None:
    assert ledger.stop_sent_at is not None
    slowest = max(a.at for got in answers.values() for a in got) - ledger.stop_sent_at
    print(
        f"\n[{variant}] SIGTERM to exit: {stop.seconds:.2f} s; waiting polls answered within "
        f"{slowest:.2f} s; acknowledged: {len(ledger.prepared)} prepared, "
        f"{len(ledger.committed)} committed, {len(ledger.acked_offsets)} acked; "
        f"{ledger.answered_after_stop} answered after the SIGTERM, "
        f"{ledger.refused} refused"
    )


@pytest.mark.parametrize(
    "variant", ["one process", "--workers 2", "--grpc-port"], ids=["plain", "workers", "grpc"]
)
def test_sigterm_under_load_loses_nothing_acknowledged_and_ends_long_polls_at_once(
    variant: str, tmp_path: Path, database_url: str
) -> None:
    grpc_port = free_port() if variant == "--grpc-port" else None
    serve_args = {
        "one process": [],
        "--workers 2": ["--workers", "2"],
        "--grpc-port": ["--grpc-port", str(grpc_port)],
    }[variant]
    with coordinator_serve(database_url, tmp_path, serve_args=serve_args) as server:
        ledger, stop, answers = asyncio.run(_stop_under_load(server, grpc_port))
        assert ledger.stop_sent_at is not None
        _report(variant, ledger, stop, answers)
        assert stop.exited, f"still running {STOP_BOUND_SECONDS} s after SIGTERM"
        assert stop.status == 0, server.output()
        assert stop.left_running == []
        _assert_waiting_polls_answered_empty_at_once(
            answers, ledger.stop_sent_at, grpc_on=grpc_port is not None
        )
    assert ledger.server_errors == []
    assert len(ledger.committed) > PRODUCERS, "the load never got going"
    _assert_nothing_acknowledged_is_lost(database_url, ledger)
    assert "Traceback" not in server.output(), server.output()


def test_sigterm_stops_the_embedded_postgres_cleanly(tmp_path: Path) -> None:
    grpc_port = free_port()
    with embedded_data_dir() as data_dir:
        pgdata = data_dir / "pgdata"
        with coordinator_serve(
            None,
            tmp_path,
            serve_args=["--workers", "2", "--grpc-port", str(grpc_port)],
            data_dir=data_dir,
        ) as server:
            ledger, stop, answers = asyncio.run(_stop_under_load(server, grpc_port))
            _report("embedded, --workers 2 --grpc-port", ledger, stop, answers)
            assert stop.exited and stop.status == 0, server.output()
            assert stop.left_running == []
            # The last user of the embedded server stopped it, with a checkpoint.
            assert postmasters_of(pgdata) == []
            assert not (pgdata / "postmaster.pid").exists()
        assert ledger.server_errors == []
        assert "Failed to stop server" not in server.output(), server.output()

        log = pgdata / "log"
        stopped = log.read_text()
        assert stopped.rstrip().endswith("database system is shut down"), stopped
        with coordinator_serve(None, tmp_path, name="again", data_dir=data_dir) as again:
            found = httpx.get(f"{again.url}/v1/transactions/{next(iter(ledger.committed))}")
            assert found.json()["state"] == "committed"
        restart = log.read_text()[len(stopped) :]
        assert "database system was shut down at" in restart, restart
        assert "not properly shut down" not in restart, restart
        assert postmasters_of(pgdata) == []
