"""Tokens against what outlives a request: gRPC Telemetry streams, client ids, per-token work.

Each test is an attack of the security issue made on a served coordinator
with real streams (grpc.aio stubs, as a client would open them): a revoked
token's stream, another token ending or taking a client's id, a stream
announcing topics by the hundred, streams and long polls past a token's
bound, subscriptions and metric series without end. Each is answered with a
RocketMQ status (and, for a stream the coordinator ends, a gRPC status)
carrying a sentence.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import psycopg
import pytest
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol import service_pb2_grpc

from bench.server import free_port
from coordinator.core import Coordinator
from tests.checkback_helpers import check_settings
from tests.conftest import LiveServer
from tests.grpc_door import (
    OK,
    GrpcDoor,
    code,
    consumer_settings,
    message,
    metadata,
    producer_settings,
    receive_request,
    resource,
)
from tests.grpc_door import message as grpc_message
from tests.rocketmq_python_client import producer_process

TOPIC = "orders"  # a topic is its own producer group on the gRPC door
GROUP = "billing"
SECONDS = 15  # the bound of every wait: generous, the answers come in well under a second

pytestmark = pytest.mark.usefixtures("own_home")


@pytest.fixture
def tokens(issue_token: Callable[..., str]) -> dict[str, str]:
    return {
        "producer": issue_token("orders-svc", produce_topics=(TOPIC,), producer_groups=(TOPIC,)),
        "consumer": issue_token("billing-svc", consume_groups=(GROUP,), consume_topics=("*",)),
        "metrics": issue_token("prometheus", metrics=True),
        "admin": issue_token("ops", admin=True),
    }


class Served:
    """A served coordinator with its gRPC door, and an aio channel to it (per event loop)."""

    def __init__(self, server: LiveServer, port: int, tokens: dict[str, str]) -> None:
        self.server = server
        self.port = port
        self.endpoint = f"127.0.0.1:{port}"
        self.tokens = tokens

    def http(self, token: str) -> httpx.Client:
        headers = {"authorization": f"Bearer {self.tokens[token]}"}
        return httpx.Client(base_url=self.server.url, headers=headers, timeout=SECONDS)


@pytest.fixture
def serve(database_url: str, tokens: dict[str, str]) -> Iterator[Callable[..., Served]]:
    """Starts a coordinator with these settings (short check-back and token intervals)."""
    with_servers: list[LiveServer] = []

    def start(**overrides: Any) -> Served:
        port = free_port()
        settings = check_settings(
            check_scheduler_enabled=True,
            check_scan_interval_seconds=0.1,
            transaction_timeout_seconds=0.3,
            check_interval_seconds=1.0,
            token_refresh_seconds=0.5,
            grpc_port=port,
            **overrides,
        )
        server = LiveServer(database_url, settings).__enter__()
        with_servers.append(server)
        return Served(server, port, tokens)

    try:
        yield start
    finally:
        for server in with_servers:
            server.__exit__(None, None, None)


class Door:
    """grpc.aio stubs on the served door, each call as one token."""

    def __init__(self, served: Served) -> None:
        self.served = served
        self.channel = grpc.aio.insecure_channel(served.endpoint)
        self.stub = service_pb2_grpc.MessagingServiceStub(self.channel)

    def as_(self, token: str, client_id: str = "test-client@1") -> list[tuple[str, str]]:
        return metadata(self.served.tokens[token], client_id)

    async def send_half(self, token: str, body: bytes) -> Any:
        request = s.SendMessageRequest(messages=[message(TOPIC, body, kind=d.TRANSACTION)])
        answer = await self.stub.SendMessage(request, metadata=self.as_(token), timeout=SECONDS)
        assert answer.status.code == OK, answer.status
        return answer.entries[0]

    def stream(self, token: str, client_id: str) -> Stream:
        return Stream(self.stub.Telemetry(metadata=self.as_(token, client_id)))

    async def __aenter__(self) -> Door:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.channel.close()


class Stream:
    """One Telemetry stream: the test writes commands and reads the coordinator's."""

    def __init__(self, call: Any) -> None:
        self.call = call

    async def settings(self, command: Any) -> Any:
        """Write Settings; the coordinator's answer to them (their status)."""
        await self.call.write(command)
        return (await self.next()).status

    async def next(self) -> Any:
        reply = await asyncio.wait_for(self.call.read(), SECONDS)
        assert reply is not grpc.aio.EOF, "the stream ended"
        return reply

    async def until_ended(self) -> list[Any]:
        """Every command until the coordinator ends the stream (bounded)."""
        replies = []
        async with asyncio.timeout(SECONDS):
            with contextlib.suppress(grpc.aio.AioRpcError):  # its end, read from call.code()
                while (reply := await self.call.read()) is not grpc.aio.EOF:
                    replies.append(reply)
        return replies

    async def next_check_back(self) -> Any:
        while True:
            reply = await self.next()
            if reply.WhichOneof("command") == "recover_orphaned_transaction_command":
                return reply.recover_orphaned_transaction_command

    def close(self) -> None:
        self.call.cancel()


def producers(db: psycopg.Connection) -> list[tuple[str, str]]:
    rows = db.execute("SELECT producer_group, instance_id FROM producers ORDER BY 1, 2")
    return [(row[0], row[1]) for row in rows.fetchall()]


async def eventually(probe: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + SECONDS
    while not probe():
        assert time.monotonic() < deadline, f"not within {SECONDS} s: {what}"
        await asyncio.sleep(0.05)


async def revoke(database_url: str, name: str) -> None:
    async with Coordinator.connect(database_url) as core:
        await core.tokens.revoke(name)


def test_a_revoked_tokens_stream_ends_and_gets_no_more_check_backs(
    serve: Callable[..., Served], database_url: str, db: psycopg.Connection
) -> None:
    served = serve()

    async def attack() -> None:
        async with Door(served) as door:
            stream = door.stream("producer", "victim@1")
            try:
                assert (await stream.settings(producer_settings(TOPIC))).code == OK
                first = await door.send_half("producer", b"before")
                recover = await stream.next_check_back()
                assert recover.transaction_id == first.transaction_id
                assert recover.message.body == b"before"

                await revoke(database_url, "orders-svc")
                await door.send_half("admin", b"after the revocation")
                replies = await stream.until_ended()
            finally:
                stream.close()
            bodies = [
                reply.recover_orphaned_transaction_command.message.body
                for reply in replies
                if reply.WhichOneof("command") == "recover_orphaned_transaction_command"
            ]
            assert b"after the revocation" not in bodies
            assert replies[-1].status.code == code("UNAUTHORIZED")
            assert "'orders-svc'" in replies[-1].status.message
            assert "revoked" in replies[-1].status.message
            assert await stream.call.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "revoked" in await stream.call.details()
            # and the instance left the registry with its stream
            await eventually(lambda: producers(db) == [], "the revoked producer left")

            # Reconnecting with the revoked token is refused too.
            again = door.stream("producer", "victim@1")
            try:
                (refusal,) = await again.until_ended()
            finally:
                again.close()
            assert refusal.status.code == code("UNAUTHORIZED")

    asyncio.run(attack())


def test_only_the_token_holding_a_client_id_may_end_or_take_it(
    serve: Callable[..., Served], db: psycopg.Connection
) -> None:
    served = serve()

    async def attack() -> None:
        async with Door(served) as door:
            victim = door.stream("producer", "victim@1")
            try:
                assert (await victim.settings(producer_settings(TOPIC))).code == OK
                assert producers(db) == [(TOPIC, "victim@1")]

                ended = await door.stub.NotifyClientTermination(
                    s.NotifyClientTerminationRequest(),
                    metadata=door.as_("metrics", "victim@1"),
                    timeout=SECONDS,
                )
                assert ended.status.code == code("FORBIDDEN")
                assert "'prometheus' may not end client 'victim@1'" in ended.status.message

                squatter = door.stream("metrics", "victim@1")
                try:
                    (refusal,) = await squatter.until_ended()
                finally:
                    squatter.close()
                assert refusal.status.code == code("FORBIDDEN")
                assert "'victim@1' is held by another token" in refusal.status.message
                assert await squatter.call.code() == grpc.StatusCode.PERMISSION_DENIED

                # The victim is still registered and still gets its check-backs.
                assert producers(db) == [(TOPIC, "victim@1")]
                half = await door.send_half("producer", b"still mine")
                assert (await victim.next_check_back()).transaction_id == half.transaction_id

                # Its own token ends it.
                own = await door.stub.NotifyClientTermination(
                    s.NotifyClientTerminationRequest(),
                    metadata=door.as_("producer", "victim@1"),
                    timeout=SECONDS,
                )
                assert own.status.code == OK
                assert producers(db) == []
            finally:
                victim.close()

    asyncio.run(attack())


def test_a_stream_announces_at_most_max_topics_per_stream(
    serve: Callable[..., Served], db: psycopg.Connection
) -> None:
    served = serve(max_topics_per_stream=3)
    many = [f"topic-{n}" for n in range(5)]

    async def attack() -> None:
        async with Door(served) as door:
            producer = door.stream("admin", "many@1")
            consumer = door.stream("admin", "many-consumer@1")
            try:
                refused = await producer.settings(producer_settings(*many))
                assert refused.code == code("BAD_REQUEST")
                assert "at most 3 topics (max_topics_per_stream)" in refused.message
                assert producers(db) == []
                assert (await producer.settings(producer_settings(*many[:3]))).code == OK
                assert len(producers(db)) == 3
                # a later Settings adds to what the stream announced already
                more = await producer.settings(producer_settings(*many[2:]))
                assert more.code == code("BAD_REQUEST")
                assert len(producers(db)) == 3

                subscriptions = consumer_settings(GROUP, many[0])
                entry = subscriptions.settings.subscription.subscriptions[0]
                for topic in many[1:]:
                    added = subscriptions.settings.subscription.subscriptions.add()
                    added.CopyFrom(entry)
                    added.topic.CopyFrom(resource(topic))
                refused = await consumer.settings(subscriptions)
                assert refused.code == code("BAD_REQUEST")
                assert "max_topics_per_stream" in refused.message
                assert db.execute("SELECT count(*) FROM subscriptions").fetchone() == (0,)
            finally:
                producer.close()
                consumer.close()

    asyncio.run(attack())


def test_streams_and_long_polls_of_a_token_share_max_long_polls_per_token(
    serve: Callable[..., Served],
) -> None:
    served = serve(max_long_polls_per_token=2)

    async def attack() -> None:
        async with Door(served) as door:
            streams: list[Stream] = []
            try:
                for n in range(3):  # one after the other: the third is the one over
                    streams.append(door.stream("consumer", f"consumer@{n}"))
                    if n < 2:
                        answer = await streams[n].settings(consumer_settings(GROUP, TOPIC))
                        assert answer.code == OK
                (refusal,) = await streams[2].until_ended()
                assert refusal.status.code == code("TOO_MANY_REQUESTS")
                assert "'billing-svc' holds 2 long polls already" in refusal.status.message
                assert await streams[2].call.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

                # The same counter over HTTP: a long poll is refused while both streams stand.
                with served.http("consumer") as http:
                    receive = f"/v1/consumer-groups/{GROUP}/receive"
                    polled = await asyncio.to_thread(http.post, receive, json={"wait_seconds": 1})
                    assert polled.status_code == 429, polled.text
                    assert "holds 2 long polls already" in polled.json()["message"]

                    # a gRPC receive too
                    answer = [
                        reply
                        async for reply in door.stub.ReceiveMessage(
                            receive_request(GROUP, TOPIC, wait=1),
                            metadata=door.as_("consumer"),
                            timeout=SECONDS,
                        )
                    ]
                    assert answer[0].status.code == code("TOO_MANY_REQUESTS")

                    # A stream that ends gives its place back.
                    streams[0].close()

                    def free() -> bool:
                        answered = http.post(receive, json={"wait_seconds": 0})
                        return answered.status_code == 200

                    await eventually(free, "a closed stream gave its long poll back")
            finally:
                for stream in streams:
                    stream.close()

    asyncio.run(attack())


def test_a_group_subscribes_to_at_most_max_subscriptions_per_group(
    serve: Callable[..., Served],
) -> None:
    served = serve(max_subscriptions_per_group=2)

    async def attack() -> None:
        async with Door(served) as door:
            with served.http("consumer") as http:
                for topic in ("t1", "t2"):
                    answer = http.put(f"/v1/consumer-groups/{GROUP}/subscriptions/{topic}", json={})
                    assert answer.status_code in (200, 201), answer.text
                third = http.put(f"/v1/consumer-groups/{GROUP}/subscriptions/t3", json={})
                assert third.status_code == 400, third.text
                assert (
                    "subscribes to 2 topics already (max_subscriptions_per_group)"
                    in (third.json()["message"])
                )
                # changing one it has is no new subscription
                again = http.put(
                    f"/v1/consumer-groups/{GROUP}/subscriptions/t2", json={"expression": "a"}
                )
                assert again.status_code == 200, again.text
            answer = [
                reply
                async for reply in door.stub.ReceiveMessage(
                    receive_request(GROUP, "t4"), metadata=door.as_("consumer"), timeout=SECONDS
                )
            ]
            assert answer[0].status.code == code("BAD_REQUEST")
            assert "max_subscriptions_per_group" in answer[0].status.message

    asyncio.run(attack())


def test_metric_series_by_group_are_bounded(serve: Callable[..., Served]) -> None:
    served = serve(max_metric_label_values=3)
    with served.http("admin") as http:
        for n in range(6):
            answer = http.put(f"/v1/consumer-groups/group-{n}/subscriptions/{TOPIC}", json={})
            assert answer.status_code == 201, answer.text
        scraped = http.get("/metrics")
    assert scraped.status_code == 200
    lag = re.findall(r"^coordinator_consumer_lag\{(.*)\} ", scraped.text, re.MULTILINE)
    assert len(lag) == 3, lag
    assert 'consumer_group="_other",topic="_other"' in lag


@pytest.mark.slow
def test_the_official_producer_gets_no_check_back_once_its_token_is_revoked(
    serve: Callable[..., Served], database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    served = serve()
    token = served.tokens["producer"]
    with producer_process(
        tmp_path, "producer", served.endpoint, [TOPIC], "unknown", token=token
    ) as producer:
        sent = producer.call("send", topic=TOPIC, body="before", transaction="open")
        producer.wait_for(
            lambda r: r.get("event") == "check" and r["message_id"] == sent["message_id"],
            SECONDS,
            "a check-back before the revocation",
        )
        asyncio.run(revoke(database_url, "orders-svc"))
        asyncio.run(eventually(lambda: producers(db) == [], "the revoked producer left"))

        admin = GrpcDoor(served.server, served.port, served.tokens["admin"])
        try:
            after = admin.send(grpc_message(TOPIC, b"after", kind=d.TRANSACTION)).entries[0]
        finally:
            admin.channel.close()
        assert after.status.code == OK
        # Due after transaction_timeout_seconds (0.3 s), then a round every 0.1 s: with no
        # producer left it waits, unchecked.
        time.sleep(2)
        row = db.execute(
            "SELECT check_count FROM messages WHERE message_id = %s", (after.message_id,)
        ).fetchone()
        assert row == (0,)
        checked = {record["message_id"] for record in producer.events("check")}
        assert after.message_id not in checked
