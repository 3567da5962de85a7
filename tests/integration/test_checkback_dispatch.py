"""Dispatching check requests: pull (long poll) and push (signed POST)."""

from __future__ import annotations

import asyncio
import base64
import time
from collections import Counter

import psycopg
import pytest

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.domain.errors import InvalidMessage
from coordinator.domain.states import CheckStatus, Resolution
from tests.checkback_helpers import (
    INSTANCE,
    check_request,
    check_settings,
    history,
    make_due,
    message,
    settled_round,
)
from tests.factories import GROUP, end, half
from tests.push_receiver import PushReceiver, Received

pytestmark = pytest.mark.anyio

SECRET = "s3cret-shared-with-producers"


@pytest.fixture
def settings() -> Settings:
    return check_settings(check_push_secret=SECRET)


async def test_a_pulled_check_request_carries_the_whole_message(
    core: Coordinator, db: psycopg.Connection
) -> None:
    await core.checkback.producers.heartbeat(GROUP, INSTANCE)
    body = bytes(range(256))
    sent = await core.transactions.prepare(
        half(
            body=body,
            tags="created",
            keys=("order-1001", "customer-7"),
            properties={"region": "eu"},
            message_group="order-1001",
        )
    )
    make_due(db, sent.offset)
    await core.checkback.rounds.run_round()

    (request,) = await core.checkback.pull.poll(GROUP, INSTANCE)
    assert request.to_json() == {
        "offset": sent.offset,
        "message_id": sent.message_id,
        "transaction_id": sent.transaction_id,
        "producer_group": GROUP,
        "check_count": 1,
        "topic": "orders",
        "tags": "created",
        "keys": ["order-1001", "customer-7"],
        "properties": {"region": "eu"},
        "body_base64": base64.b64encode(body).decode(),
        "body_text": None,
        "message_group": "order-1001",
        "born_at": message(db, sent.offset)["born_at"].isoformat(),
    }
    assert check_request(db, sent.offset)["status"] == CheckStatus.DELIVERED
    assert await core.checkback.pull.poll(GROUP, INSTANCE) == []  # handed over once

    # the producer answers by ending the transaction from the check
    await core.transactions.end(end(sent.transaction_id, Resolution.COMMIT, from_check=True))
    row = message(db, sent.offset)
    assert (row["state"], row["resolution_source"]) == ("committed", "check")
    assert history(db, sent.offset)[-1][:3] == ("check", "prepared", "committed")


async def test_a_waiting_long_poll_is_woken_by_the_round(
    database_url: str, db: psycopg.Connection, settings: Settings
) -> None:
    # LISTEN/NOTIFY wakes the poll; a long fallback makes sure it is the wake-up
    settings.check_poll_fallback_seconds = 30.0
    async with (
        Coordinator.connect(database_url, settings, listen=True) as node_a,
        Coordinator.connect(database_url, settings) as node_b,
    ):
        await node_a.checkback.producers.heartbeat(GROUP, INSTANCE)
        sent = await node_a.transactions.prepare(half())
        waiting = asyncio.create_task(node_a.checkback.pull.poll(GROUP, INSTANCE, wait_seconds=25))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        make_due(db, sent.offset)
        await node_b.checkback.rounds.run_round()  # another node claims; node A's poll wakes
        (request,) = await asyncio.wait_for(waiting, timeout=20)
        assert request.transaction_id == sent.transaction_id


async def test_without_notifications_a_long_poll_falls_back_to_polling(
    core: Coordinator, db: psycopg.Connection
) -> None:
    assert core.notifier is None
    await core.checkback.producers.heartbeat(GROUP, INSTANCE)
    sent = await core.transactions.prepare(half())
    waiting = asyncio.create_task(core.checkback.pull.poll(GROUP, INSTANCE, wait_seconds=25))
    make_due(db, sent.offset)
    await core.checkback.rounds.run_round()
    (request,) = await asyncio.wait_for(waiting, timeout=20)
    assert request.offset == sent.offset


async def test_an_empty_long_poll_returns_after_its_wait(core: Coordinator) -> None:
    assert await core.checkback.pull.poll(GROUP, INSTANCE, wait_seconds=0.3) == []
    # polling counts as being heard from: the instance is registered and live
    (producer,) = await core.checkback.producers.instances(GROUP)
    assert producer.instance_id == INSTANCE and producer.live and producer.check_url is None


async def test_check_requests_are_spread_over_the_live_instances(
    core: Coordinator, db: psycopg.Connection
) -> None:
    instances = ["producer-a", "producer-b", "producer-c"]
    for instance in instances:
        await core.checkback.producers.heartbeat(GROUP, instance)
    sent = await core.transactions.prepare_batch([half(body=f"m{i}".encode()) for i in range(30)])
    make_due(db, *(s.offset for s in sent))
    await core.checkback.rounds.run_round()

    got = {i: await core.checkback.pull.poll(GROUP, i, max_requests=100) for i in instances}
    offsets = [r.offset for requests in got.values() for r in requests]
    assert sorted(offsets) == sorted(s.offset for s in sent)  # each exactly once
    assert all(len(requests) >= 5 for requests in got.values()), {i: len(r) for i, r in got.items()}


async def test_the_next_check_of_a_message_goes_to_another_instance(
    core: Coordinator, db: psycopg.Connection
) -> None:
    for instance in ("producer-a", "producer-b"):
        await core.checkback.producers.heartbeat(GROUP, instance)
    sent = await core.transactions.prepare(half())
    addressed = []
    for _ in range(3):  # check_max
        make_due(db, sent.offset)
        await core.checkback.rounds.run_round()
        addressed.append(check_request(db, sent.offset)["instance_id"])
    assert addressed[0] != addressed[1] and addressed[2] == addressed[0]


async def test_a_dead_instance_is_replaced_by_another_of_its_group(
    core: Coordinator, db: psycopg.Connection
) -> None:
    await core.checkback.producers.heartbeat(GROUP, "first")
    sent = await core.transactions.prepare(half())
    make_due(db, sent.offset)
    await core.checkback.rounds.run_round()
    assert check_request(db, sent.offset)["instance_id"] == "first"
    # "first" dies without answering: it stops heart-beating; "second" starts
    db.execute("UPDATE producers SET last_seen_at = now() - interval '1 hour'")
    await core.checkback.producers.heartbeat(GROUP, "second")

    make_due(db, sent.offset)
    await core.checkback.rounds.run_round()
    assert await core.checkback.pull.poll(GROUP, "first") == []
    (request,) = await core.checkback.pull.poll(GROUP, "second")
    assert request.check_count == 2
    await core.transactions.end(end(request.transaction_id, Resolution.ROLLBACK, from_check=True))
    assert message(db, sent.offset)["state"] == "rolled_back"


async def test_a_cleanly_stopped_instance_gets_no_more_checks(
    core: Coordinator, db: psycopg.Connection
) -> None:
    await core.checkback.producers.heartbeat(GROUP, INSTANCE)
    assert await core.checkback.producers.leave(GROUP, INSTANCE) is True
    assert await core.checkback.producers.leave(GROUP, INSTANCE) is False
    sent = await core.transactions.prepare(half())
    make_due(db, sent.offset)
    assert len((await core.checkback.rounds.run_round()).waiting) == 1


@pytest.mark.parametrize(
    ("answer", "state", "source"),
    [("commit", "committed", "check"), ("rollback", "rolled_back", "check")],
)
async def test_a_push_answer_resolves_the_transaction(
    core: Coordinator, db: psycopg.Connection, answer: str, state: str, source: str
) -> None:
    with PushReceiver(lambda _: (200, {"resolution": answer})) as receiver:
        await core.checkback.producers.heartbeat(GROUP, INSTANCE, receiver.url)
        sent = await core.transactions.prepare(half(tags="created"))
        make_due(db, sent.offset)
        result = await settled_round(core.checkback)

    assert (result.pushed, result.resolved_by_push, result.push_failures) == (1, 1, 0)
    (pushed,) = receiver.received
    assert pushed.signed_with(SECRET)
    assert pushed.signature.startswith("sha256=")
    assert not pushed.signed_with("another secret")
    assert pushed.timestamp is not None and abs(int(pushed.timestamp) - time.time()) < 60
    assert pushed.json["transaction_id"] == sent.transaction_id
    assert pushed.json["check_count"] == 1 and pushed.json["tags"] == "created"
    row = message(db, sent.offset)
    assert (row["state"], row["resolution_source"]) == (state, source)
    assert check_request(db, sent.offset) is None


@pytest.mark.parametrize("reply", [(200, {"resolution": "unknown"}), (200, None), (204, None)])
async def test_a_push_without_an_answer_leaves_the_end_to_the_producer(
    core: Coordinator, db: psycopg.Connection, reply: tuple
) -> None:
    with PushReceiver(lambda _: reply) as receiver:
        await core.checkback.producers.heartbeat(GROUP, INSTANCE, receiver.url)
        sent = await core.transactions.prepare(half())
        make_due(db, sent.offset)
        result = await settled_round(core.checkback)
    assert (result.pushed, result.resolved_by_push) == (1, 0)
    assert message(db, sent.offset)["state"] == "prepared"
    assert check_request(db, sent.offset)["status"] == CheckStatus.DELIVERED
    await core.transactions.end(end(sent.transaction_id, Resolution.COMMIT, from_check=True))
    assert message(db, sent.offset)["resolution_source"] == "check"


async def test_a_failed_push_waits_for_the_next_check(
    core: Coordinator, db: psycopg.Connection
) -> None:
    calls: Counter[str] = Counter()

    def flaky(_: Received) -> tuple:
        calls["n"] += 1
        return (503, None) if calls["n"] == 1 else (200, {"resolution": "commit"})

    with PushReceiver(flaky) as receiver:
        await core.checkback.producers.heartbeat(GROUP, INSTANCE, receiver.url)
        sent = await core.transactions.prepare(half())
        make_due(db, sent.offset)
        result = await settled_round(core.checkback)
        assert (result.pushed, result.push_failures) == (0, 1)
        request = check_request(db, sent.offset)
        assert request["status"] == CheckStatus.FAILED
        assert request["detail"] == "HTTP 503 from the check URL"
        assert message(db, sent.offset)["check_count"] == 1  # the check happened

        make_due(db, sent.offset)
        await settled_round(core.checkback)
    assert [r.json["check_count"] for r in receiver.received] == [1, 2]
    assert message(db, sent.offset)["state"] == "committed"


async def test_an_unreachable_check_url_is_a_failed_push(
    core: Coordinator, db: psycopg.Connection
) -> None:
    with PushReceiver() as receiver:
        url = receiver.url
    # the receiver is gone: connection refused
    await core.checkback.producers.heartbeat(GROUP, INSTANCE, url)
    sent = await core.transactions.prepare(half())
    make_due(db, sent.offset)
    result = await settled_round(core.checkback)
    assert result.push_failures == 1
    assert check_request(db, sent.offset)["detail"].startswith("ConnectError")


async def test_a_check_url_resolving_to_a_forbidden_address_is_not_pushed(
    core: Coordinator, db: psycopg.Connection
) -> None:
    # Registration refuses this URL, so the row is written directly: it stands for
    # a host name that resolves to such an address by the time of the push.
    await core.checkback.producers.heartbeat(GROUP, INSTANCE, "http://10.0.0.7/check")
    db.execute(
        "UPDATE producers SET check_url = 'http://169.254.169.254/latest/meta-data' "
        "WHERE instance_id = %s",
        (INSTANCE,),
    )
    sent = await core.transactions.prepare(half())
    make_due(db, sent.offset)
    result = await settled_round(core.checkback)
    assert (result.pushed, result.push_failures) == (0, 1)
    request = check_request(db, sent.offset)
    assert request["status"] == CheckStatus.FAILED
    assert request["detail"].startswith(
        "check URL resolves to a forbidden address 169.254.169.254 (link-local"
    )
    row = message(db, sent.offset)
    assert (row["state"], row["check_count"]) == ("prepared", 1)  # waits for its next check


async def test_a_push_answer_for_an_already_resolved_message_changes_nothing(
    core: Coordinator, db: psycopg.Connection
) -> None:
    sent_holder: list = []

    async def resolve_first() -> None:
        await core.transactions.end(end(sent_holder[0].transaction_id, Resolution.ROLLBACK))

    with PushReceiver(lambda _: (200, {"resolution": "commit"})) as receiver:
        await core.checkback.producers.heartbeat(GROUP, INSTANCE, receiver.url)
        sent = await core.transactions.prepare(half())
        sent_holder.append(sent)
        make_due(db, sent.offset)
        claimed = await core.checkback.rounds.claim()
        await resolve_first()  # the producer ends it between claim and push
        result = await core.checkback.rounds.dispatch(claimed)
    assert receiver.received == [] and result.pushed == 0  # a resolved message is not pushed
    assert message(db, sent.offset)["state"] == "rolled_back"


async def test_pushes_are_unsigned_without_a_secret(
    database_url: str, db: psycopg.Connection
) -> None:
    async with Coordinator.connect(database_url, check_settings()) as core:
        with PushReceiver() as receiver:
            await core.checkback.producers.heartbeat(GROUP, INSTANCE, receiver.url)
            sent = await core.transactions.prepare(half())
            make_due(db, sent.offset)
            await settled_round(core.checkback)
    (pushed,) = receiver.received
    assert pushed.signature is None
    assert pushed.timestamp is None


@pytest.mark.parametrize(
    ("instance_id", "url"),
    [
        ("has space", None),
        ("x" * 129, None),
        (INSTANCE, "ftp://example.com/check"),
        (INSTANCE, "/relative/check"),
        (INSTANCE, "http://" + "x" * 2100),
        (INSTANCE, "http://169.254.169.254/latest/meta-data"),
        (INSTANCE, "http://[fe80::1]/x"),
        (INSTANCE, "http://metadata.google.internal/"),
        (INSTANCE, "http://0.0.0.0/"),
        (INSTANCE, "http://u:p@127.0.0.1/"),
    ],
)
async def test_bad_instance_ids_and_check_urls_are_refused(
    core: Coordinator, instance_id: str, url: str | None
) -> None:
    with pytest.raises(InvalidMessage):
        await core.checkback.producers.heartbeat(GROUP, instance_id, url)
    assert await core.checkback.producers.instances() == []


async def test_a_heartbeat_keeps_the_registration_and_updates_last_seen(
    core: Coordinator,
) -> None:
    first = await core.checkback.producers.heartbeat(
        GROUP, "192.168.0.7@12345", "http://10.0.0.7/check"
    )
    await asyncio.sleep(0.05)
    again = await core.checkback.producers.heartbeat(
        GROUP, "192.168.0.7@12345", "http://10.0.0.7/check"
    )
    assert again.registered_at == first.registered_at
    assert again.last_seen_at > first.last_seen_at
    assert again.mode.value == "push" and again.live
    # a long poll of the same instance keeps its check URL
    await core.checkback.pull.poll(GROUP, "192.168.0.7@12345")
    (listed,) = await core.checkback.producers.instances(GROUP)
    assert listed.check_url == "http://10.0.0.7/check"
