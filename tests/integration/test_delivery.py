"""Delivery to consumer groups against real PostgreSQL: commit -> receivable,
rollback -> never, fan-out to groups, competing consumers, redelivery, receipt
handles, dead letters, tag filters, FIFO, long polling, lag."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import psycopg
import pytest

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.domain.delivery import AckOutcome, ReceivedMessage
from coordinator.domain.errors import InvalidMessage, NotFound, ReceiptHandleStale
from coordinator.domain.messages import NewMessage
from coordinator.domain.states import Resolution
from tests.factories import TOPIC, end, half

pytestmark = pytest.mark.anyio

GROUP = "billing"
OTHER_GROUP = "shipping"
# An operator's hand-written commit: the trigger path, no coordinator involved.
COMMIT_BY_HAND = (
    "UPDATE messages SET state = 'committed', resolved_at = now(), "
    "resolution_source = 'operator' WHERE id = %s"
)


async def commit(core: Coordinator, body: bytes = b"order", **fields: object) -> int:
    sent = await core.transactions.prepare(half(body=body, **fields))
    await core.transactions.end(end(sent.transaction_id, Resolution.COMMIT))
    return sent.offset


async def receive(core: Coordinator, group: str = GROUP, **options: object) -> list:
    options.setdefault("max_messages", 100)
    return await core.delivery.receive(group, **options)  # type: ignore[arg-type]


async def eventually(
    attempt: Callable[[], Awaitable[list[ReceivedMessage]]], deadline: float = 15.0
) -> list[ReceivedMessage]:
    """Call attempt until it returns something (for timing behaviour: no timed asserts)."""
    stop = time.monotonic() + deadline
    while time.monotonic() < stop:
        got = await attempt()
        if got:
            return got
        await asyncio.sleep(0.05)
    raise AssertionError("nothing was received before the deadline")


def bodies(messages: list[ReceivedMessage]) -> list[bytes]:
    return [m.body for m in messages]


def deliveries(db: psycopg.Connection) -> int:
    return db.execute("SELECT count(*) FROM deliveries").fetchone()[0]


@pytest.fixture
async def subscribed(core: Coordinator) -> Coordinator:
    await core.delivery.subscribe(GROUP, TOPIC)
    return core


async def test_a_committed_message_is_receivable_with_all_its_fields(
    subscribed: Coordinator,
) -> None:
    core = subscribed
    sent = await core.transactions.prepare(
        half(
            body=b"order 1001 created",
            tags="created",
            keys=("order-1001", "customer-7"),
            properties={"region": "eu"},
        )
    )
    assert await receive(core) == []  # prepared: invisible to consumers
    await core.transactions.end(end(sent.transaction_id, Resolution.COMMIT))

    (message,) = await receive(core)
    assert message.offset == sent.offset and message.message_id == sent.message_id
    assert message.transaction_id == sent.transaction_id
    assert message.body == b"order 1001 created" and message.topic == TOPIC
    assert message.tags == "created" and message.keys == ("order-1001", "customer-7")
    assert message.properties == {"region": "eu"}
    assert message.delivery_attempt == 1 and message.consumer_group == GROUP
    assert message.committed_at >= message.born_at
    assert message.invisible_until > message.committed_at
    assert message.receipt_handle.startswith(f"{message.receipt_handle.split('.')[0]}.")


@pytest.mark.parametrize("resolution", [Resolution.ROLLBACK, Resolution.UNKNOWN])
async def test_rolled_back_and_unresolved_messages_are_never_delivered(
    subscribed: Coordinator, db: psycopg.Connection, resolution: Resolution
) -> None:
    core = subscribed
    sent = await core.transactions.prepare(half())
    await core.transactions.end(end(sent.transaction_id, resolution))
    assert await receive(core) == []
    assert deliveries(db) == 0


@pytest.mark.parametrize("state", ["discarded", "expired", "rolled_back"])
async def test_messages_ending_in_other_states_are_never_delivered(
    subscribed: Coordinator, db: psycopg.Connection, state: str
) -> None:
    sent = await subscribed.transactions.prepare(half())
    db.execute(
        "UPDATE messages SET state = %s, resolved_at = now(), resolution_source = 'expiry' "
        "WHERE id = %s",
        (state, sent.offset),
    )
    assert deliveries(db) == 0
    assert await receive(subscribed) == []


async def test_any_update_to_committed_fans_out_in_the_same_transaction(
    subscribed: Coordinator, db: psycopg.Connection, database_url: str
) -> None:
    """The trigger path: an operator's hand-written UPDATE delivers too."""
    sent = await subscribed.transactions.prepare(half(body=b"by hand"))
    with psycopg.connect(database_url) as conn:
        conn.execute(COMMIT_BY_HAND, (sent.offset,))
        # inside the committing transaction the delivery already exists ...
        assert conn.execute("SELECT count(*) FROM deliveries").fetchone() == (1,)
        # ... and outside it does not, until it commits
        assert deliveries(db) == 0
    assert deliveries(db) == 1
    assert bodies(await receive(subscribed)) == [b"by hand"]
    # other updates of a committed message add nothing
    db.execute("UPDATE messages SET check_count = check_count + 1 WHERE id = %s", (sent.offset,))
    assert deliveries(db) == 1


async def test_a_rolled_back_commit_delivers_nothing(
    subscribed: Coordinator, db: psycopg.Connection, database_url: str
) -> None:
    sent = await subscribed.transactions.prepare(half())
    with psycopg.connect(database_url) as conn:
        conn.execute(
            "UPDATE messages SET state = 'committed', resolved_at = now() WHERE id = %s",
            (sent.offset,),
        )
        conn.rollback()
    assert deliveries(db) == 0
    assert await receive(subscribed) == []


async def test_normal_messages_are_delivered(subscribed: Coordinator) -> None:
    await subscribed.transactions.send(NewMessage(topic=TOPIC, body=b"one"))
    await subscribed.transactions.send_batch(
        [NewMessage(topic=TOPIC, body=b"two"), half(body=b"three")]
    )
    assert sorted(bodies(await receive(subscribed))) == [b"one", b"three", b"two"]


async def test_two_groups_each_get_every_message(core: Coordinator) -> None:
    await core.delivery.subscribe(GROUP, TOPIC)
    await core.delivery.subscribe(OTHER_GROUP, TOPIC)
    await core.delivery.subscribe("payments-only", "payments")
    for i in range(5):
        await commit(core, f"m{i}".encode())
    expected = [f"m{i}".encode() for i in range(5)]
    assert bodies(await receive(core, GROUP)) == expected
    assert bodies(await receive(core, OTHER_GROUP)) == expected
    assert await receive(core, "payments-only") == []


async def test_a_subscription_receives_only_messages_committed_after_it(
    core: Coordinator,
) -> None:
    await commit(core, b"before")
    await core.delivery.subscribe(GROUP, TOPIC)
    await commit(core, b"after")
    assert bodies(await receive(core)) == [b"after"]


async def test_competing_consumers_never_share_an_in_flight_message(
    subscribed: Coordinator,
) -> None:
    core = subscribed
    await core.transactions.send_batch(
        [NewMessage(topic=TOPIC, body=f"m{i}".encode()) for i in range(60)]
    )

    async def consumer() -> list[int]:
        mine: list[int] = []
        while batch := await core.delivery.receive(GROUP, max_messages=4, invisible_seconds=60):
            mine.extend(m.offset for m in batch)
        return mine

    taken = await asyncio.gather(*(consumer() for _ in range(8)))
    everything = [offset for mine in taken for offset in mine]
    assert len(everything) == 60 and len(set(everything)) == 60
    assert sum(1 for mine in taken if mine) > 1  # the work was actually shared


async def test_a_message_not_acked_in_time_is_delivered_again(
    subscribed: Coordinator, db: psycopg.Connection
) -> None:
    core = subscribed
    await commit(core)
    (first,) = await receive(core, invisible_seconds=0.3)
    assert await receive(core) == []  # invisible to the rest of the group

    (again,) = await eventually(lambda: receive(core, invisible_seconds=30))
    assert again.offset == first.offset
    assert (first.delivery_attempt, again.delivery_attempt) == (1, 2)
    assert again.receipt_handle != first.receipt_handle

    with pytest.raises(ReceiptHandleStale, match="received again"):
        await core.delivery.ack(GROUP, first.receipt_handle)
    await core.delivery.ack(GROUP, again.receipt_handle)
    assert deliveries(db) == 0  # acked rows do not pile up
    with pytest.raises(NotFound, match="acked already"):
        await core.delivery.ack(GROUP, again.receipt_handle)


async def test_an_ack_after_the_invisible_duration_works_until_someone_else_receives(
    subscribed: Coordinator, db: psycopg.Connection
) -> None:
    core = subscribed
    await commit(core)
    (message,) = await receive(core, invisible_seconds=0.05)
    await asyncio.sleep(0.1)
    await core.delivery.ack(GROUP, message.receipt_handle)
    assert deliveries(db) == 0


async def test_changing_the_invisible_duration_issues_a_new_handle(
    subscribed: Coordinator,
) -> None:
    core = subscribed
    await commit(core)
    (message,) = await receive(core, invisible_seconds=0.3)
    longer = await core.delivery.change_invisible_duration(GROUP, message.receipt_handle, 60)
    assert longer.receipt_handle != message.receipt_handle
    assert longer.delivery_attempt == 1 and longer.invisible_until > message.invisible_until
    with pytest.raises(ReceiptHandleStale):
        await core.delivery.change_invisible_duration(GROUP, message.receipt_handle, 60)
    with pytest.raises(ReceiptHandleStale):
        await core.delivery.ack(GROUP, message.receipt_handle)
    await asyncio.sleep(0.5)
    assert await receive(core) == []  # the original 0.3 s no longer applies

    shorter = await core.delivery.change_invisible_duration(GROUP, longer.receipt_handle, 0.05)
    (again,) = await eventually(lambda: receive(core))
    assert again.delivery_attempt == 2
    with pytest.raises(ReceiptHandleStale):
        await core.delivery.ack(GROUP, shorter.receipt_handle)
    await core.delivery.ack(GROUP, again.receipt_handle)


async def test_ack_batch_reports_each_handle(
    subscribed: Coordinator, db: psycopg.Connection
) -> None:
    core = subscribed
    for i in range(3):
        await commit(core, f"m{i}".encode())
    a, b, c = await receive(core)
    renewed = await core.delivery.change_invisible_duration(GROUP, c.receipt_handle, 30)
    await core.delivery.ack(GROUP, b.receipt_handle)
    results = await core.delivery.ack_batch(
        GROUP, [a.receipt_handle, b.receipt_handle, c.receipt_handle, renewed.receipt_handle]
    )
    assert [r.outcome for r in results] == [
        AckOutcome.ACKED,
        AckOutcome.NOT_FOUND,
        AckOutcome.STALE,
        AckOutcome.ACKED,
    ]
    assert results[0].receipt_handle == a.receipt_handle
    assert deliveries(db) == 0


async def test_a_handle_of_another_group_is_not_found(core: Coordinator) -> None:
    await core.delivery.subscribe(GROUP, TOPIC)
    await core.delivery.subscribe(OTHER_GROUP, TOPIC)
    await commit(core)
    (mine,) = await receive(core, GROUP)
    with pytest.raises(NotFound):
        await core.delivery.ack(OTHER_GROUP, mine.receipt_handle)
    await core.delivery.ack(GROUP, mine.receipt_handle)


async def test_out_of_attempts_moves_to_the_dead_letters_and_requeue_brings_it_back(
    core: Coordinator, db: psycopg.Connection
) -> None:
    await core.delivery.subscribe(GROUP, TOPIC, max_delivery_attempts=2)
    offset = await commit(core, b"poison", tags="created")
    await commit(core, b"fine")

    attempts = []
    for _ in range(2):
        got = await eventually(lambda: receive(core, invisible_seconds=0.1))
        attempts += [(m.body, m.delivery_attempt) for m in got if m.body == b"poison"]
        for m in got:
            if m.body == b"fine":
                await core.delivery.ack(GROUP, m.receipt_handle)
    assert attempts == [(b"poison", 1), (b"poison", 2)]
    await asyncio.sleep(0.2)
    assert await receive(core) == []  # a third delivery is not made: dead-lettered

    (letter,) = await core.delivery.dead_letters(GROUP)
    assert (letter.offset, letter.attempts, letter.body, letter.tags) == (
        offset,
        2,
        b"poison",
        "created",
    )
    (lag,) = await core.delivery.lag(GROUP)
    assert (lag.lag, lag.in_flight, lag.dead_letters) == (0, 0, 1)

    await core.delivery.requeue_dead_letter(letter.id, GROUP)
    assert await core.delivery.dead_letters(GROUP) == []
    (back,) = await receive(core, invisible_seconds=0.1)
    assert back.offset == offset and back.delivery_attempt == 1  # a fresh attempt count
    with pytest.raises(NotFound, match=f"no dead letter {letter.id}"):
        await core.delivery.requeue_dead_letter(letter.id, GROUP)


async def test_requeue_all_of_a_group(core: Coordinator) -> None:
    await core.delivery.subscribe(GROUP, TOPIC, max_delivery_attempts=1)
    await core.delivery.subscribe(GROUP, "payments", max_delivery_attempts=1)
    for topic in (TOPIC, TOPIC, "payments"):
        await commit(core, topic=topic)
    await receive(core, invisible_seconds=0.05)
    await asyncio.sleep(0.1)
    assert await receive(core) == []
    assert len(await core.delivery.dead_letters(GROUP)) == 3
    assert await core.delivery.requeue_dead_letters(GROUP, topic="payments") == 1
    assert await core.delivery.requeue_dead_letters(GROUP) == 2
    assert await core.delivery.requeue_dead_letters(GROUP) == 0
    assert len(await receive(core)) == 3


async def test_dead_letters_outlive_their_subscription_but_need_it_to_requeue(
    core: Coordinator,
) -> None:
    await core.delivery.subscribe(GROUP, TOPIC, max_delivery_attempts=1)
    await commit(core)
    await receive(core, invisible_seconds=0.05)
    await asyncio.sleep(0.1)
    await receive(core)
    await core.delivery.unsubscribe(GROUP, TOPIC)
    (letter,) = await core.delivery.dead_letters(GROUP)
    with pytest.raises(NotFound, match="no longer subscribes"):
        await core.delivery.requeue_dead_letter(letter.id)
    await core.delivery.subscribe(GROUP, TOPIC)
    await core.delivery.requeue_dead_letter(letter.id)
    assert len(await receive(core)) == 1


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("*", [b"a", b"b", b"c", b"none"]),
        ("", [b"a", b"b", b"c", b"none"]),
        ("TagA", [b"a"]),
        ("TagA || TagB", [b"a", b"b"]),
        (" TagB ||TagC||TagB ", [b"b", b"c"]),
        ("Other", []),
    ],
)
async def test_tag_filters(core: Coordinator, expression: str, expected: list[bytes]) -> None:
    result = await core.delivery.subscribe(GROUP, TOPIC, expression)
    assert result.created is True
    for body, tags in ((b"a", "TagA"), (b"b", "TagB"), (b"c", "TagC"), (b"none", None)):
        await commit(core, body, tags=tags)
    assert bodies(await receive(core)) == expected


async def test_concurrent_first_subscriptions_never_pass_the_groups_bound(
    database_url: str,
) -> None:
    settings = Settings(database_url=None, max_subscriptions_per_group=2, pool_max_size=12)
    async with (
        Coordinator.connect(database_url, settings) as core,
        await psycopg.AsyncConnection.connect(database_url) as blocker,
    ):
        # Several rounds, each a group of its own: twelve of its topics at once,
        # each on a connection of its own, held at the table's lock and let go
        # together. Their counts would see the group (nearly) empty if nothing
        # made them take turns.
        for round_number in range(5):
            group = f"{GROUP}-{round_number}"
            await blocker.execute("LOCK TABLE subscriptions IN EXCLUSIVE MODE")
            subscribing = asyncio.gather(
                *(core.delivery.subscribe(group, f"topic-{n}") for n in range(12)),
                return_exceptions=True,
            )
            await asyncio.sleep(0.3)
            await blocker.commit()
            outcomes = await asyncio.wait_for(subscribing, 30)
            refused = [o for o in outcomes if isinstance(o, InvalidMessage)]
            assert len(refused) == 10, (round_number, outcomes)
            assert all("subscribes to 2 topics already" in e.message for e in refused)
            assert len(await core.delivery.subscriptions(group)) == 2
        # A topic the group has already is still changed while the group is full.
        taken = next(o for o in outcomes if not isinstance(o, BaseException))
        changed = await core.delivery.subscribe(group, taken.subscription.topic, "TagA")
        assert not changed.created and changed.subscription.expression == "TagA"


async def test_changing_a_subscription_applies_to_later_commits(core: Coordinator) -> None:
    await core.delivery.subscribe(GROUP, TOPIC, "TagA")
    await commit(core, b"a1", tags="TagA")
    changed = await core.delivery.subscribe(GROUP, TOPIC, "TagB", max_delivery_attempts=3)
    assert changed.created is False
    assert changed.subscription.tags == ("TagB",)
    assert changed.subscription.max_delivery_attempts == 3
    await commit(core, b"a2", tags="TagA")
    await commit(core, b"b1", tags="TagB")
    assert bodies(await receive(core)) == [b"a1", b"b1"]
    (listed,) = await core.delivery.subscriptions(GROUP)
    assert listed.expression == "TagB"


async def test_fifo_delivers_a_message_group_one_at_a_time_in_commit_order(
    core: Coordinator,
) -> None:
    await core.delivery.subscribe(GROUP, TOPIC, fifo=True)
    await core.delivery.subscribe(OTHER_GROUP, TOPIC)  # not FIFO
    for body, group in (
        (b"o1-a", "order-1"),
        (b"o2-a", "order-2"),
        (b"o1-b", "order-1"),
        (b"free", None),
        (b"o1-c", "order-1"),
        (b"o2-b", "order-2"),
    ):
        await commit(core, body, message_group=group)

    assert len(await receive(core, OTHER_GROUP)) == 6  # no ordering constraint there

    first = await receive(core)
    assert bodies(first) == [b"o1-a", b"o2-a", b"free"]
    assert await receive(core) == []  # every message group has one in flight
    by_body = {m.body: m for m in first}

    await core.delivery.ack(GROUP, by_body[b"o1-a"].receipt_handle)
    assert bodies(await receive(core)) == [b"o1-b"]
    await core.delivery.ack(GROUP, by_body[b"o2-a"].receipt_handle)
    (o2b,) = await receive(core)
    assert o2b.body == b"o2-b"
    await core.delivery.ack(GROUP, o2b.receipt_handle)
    assert await receive(core) == []  # o1-b still in flight blocks o1-c


async def test_fifo_redelivers_the_head_before_anything_behind_it(core: Coordinator) -> None:
    await core.delivery.subscribe(GROUP, TOPIC, fifo=True)
    for i in range(3):
        await commit(core, f"m{i}".encode(), message_group="order-1")
    (head,) = await receive(core, invisible_seconds=0.1)
    (again,) = await eventually(lambda: receive(core))
    assert (head.body, again.body, again.delivery_attempt) == (b"m0", b"m0", 2)
    await core.delivery.ack(GROUP, again.receipt_handle)
    assert bodies(await receive(core)) == [b"m1"]


async def test_a_dead_lettered_fifo_head_unblocks_its_message_group(core: Coordinator) -> None:
    await core.delivery.subscribe(GROUP, TOPIC, fifo=True, max_delivery_attempts=1)
    await commit(core, b"poison", message_group="order-1")
    await commit(core, b"next", message_group="order-1")
    assert bodies(await receive(core, invisible_seconds=0.05)) == [b"poison"]
    (after,) = await eventually(lambda: receive(core))
    assert after.body == b"next"
    assert [d.body for d in await core.delivery.dead_letters(GROUP)] == [b"poison"]


async def test_concurrent_commits_of_one_fifo_message_group_take_turns(
    core: Coordinator, database_url: str
) -> None:
    """Delivery ids of a message group follow commit order: the second commit
    waits for the first, so a lower id can never appear after a higher one."""
    await core.delivery.subscribe(GROUP, TOPIC, fifo=True)
    first = await core.transactions.prepare(half(body=b"first", message_group="order-1"))
    second = await core.transactions.prepare(half(body=b"second", message_group="order-1"))
    other = await core.transactions.prepare(half(body=b"other", message_group="order-2"))
    commit_sql = "UPDATE messages SET state = 'committed', resolved_at = now() WHERE id = %s"
    with psycopg.connect(database_url) as one, psycopg.connect(database_url) as two:
        one.execute(commit_sql, (first.offset,))  # not committed yet
        two.execute("SET lock_timeout = '200ms'")
        two.execute(commit_sql, (other.offset,))  # another message group: no waiting
        with pytest.raises(psycopg.errors.LockNotAvailable):
            two.execute(commit_sql, (second.offset,))
        two.rollback()
        one.commit()
        two.execute(commit_sql, (second.offset,))
        two.commit()
    assert bodies(await receive(core)) == [b"first"]


async def test_lag_counts_unacked_in_flight_and_dead_letters(
    subscribed: Coordinator, db: psycopg.Connection
) -> None:
    core = subscribed
    await core.delivery.subscribe(OTHER_GROUP, TOPIC)
    assert [(x.consumer_group, x.lag) for x in await core.delivery.lag()] == [
        (GROUP, 0),
        (OTHER_GROUP, 0),
    ]
    for i in range(3):
        await commit(core, f"m{i}".encode())
    (m0,) = await receive(core, max_messages=1)
    lags = {x.consumer_group: x for x in await core.delivery.lag()}
    assert (lags[GROUP].lag, lags[GROUP].in_flight) == (3, 1)
    assert (lags[OTHER_GROUP].lag, lags[OTHER_GROUP].in_flight) == (3, 0)
    assert lags[GROUP].oldest_pending_at == m0.committed_at
    await core.delivery.ack(GROUP, m0.receipt_handle)
    assert db.execute(
        "SELECT lag, in_flight, dead_letters FROM consumer_lag WHERE consumer_group = %s",
        (GROUP,),
    ).fetchone() == (2, 0, 0)


async def test_unsubscribing_drops_the_groups_unacked_messages(
    subscribed: Coordinator, db: psycopg.Connection
) -> None:
    await commit(subscribed)
    removed = await subscribed.delivery.unsubscribe(GROUP, TOPIC)
    assert removed.topic == TOPIC
    assert deliveries(db) == 0
    with pytest.raises(NotFound, match="does not subscribe"):
        await receive(subscribed)
    with pytest.raises(NotFound):
        await subscribed.delivery.unsubscribe(GROUP, TOPIC)


async def test_receiving_a_topic_the_group_does_not_subscribe_is_not_found(
    subscribed: Coordinator,
) -> None:
    with pytest.raises(NotFound, match="'payments'"):
        await receive(subscribed, topic="payments")
    assert await receive(subscribed, topic=TOPIC) == []


async def test_deleting_a_message_removes_its_deliveries_and_history(
    subscribed: Coordinator, db: psycopg.Connection
) -> None:
    offset = await commit(subscribed)
    kept = await commit(subscribed)
    db.execute("DELETE FROM messages WHERE id = %s", (offset,))
    assert deliveries(db) == 1
    history = "SELECT count(*) FROM message_history WHERE message_offset = %s"
    assert db.execute(history, (offset,)).fetchone() == (0,)
    assert db.execute(history, (kept,)).fetchone() == (2,)


async def test_unsubscribing_while_a_commit_fans_out_leaves_no_delivery_behind(
    subscribed: Coordinator, db: psycopg.Connection, database_url: str
) -> None:
    """The unsubscribe waits for the commit that is fanning out to the
    subscription, then removes what it fanned out: no delivery outlives its
    subscription (as when deliveries had a foreign key to it)."""
    sent = await subscribed.transactions.prepare(half(body=b"racing"))
    with psycopg.connect(database_url) as committing:
        committing.execute(COMMIT_BY_HAND, (sent.offset,))
        unsubscribe = asyncio.create_task(subscribed.delivery.unsubscribe(GROUP, TOPIC))
        await asyncio.sleep(0.3)
        assert not unsubscribe.done()  # blocked by the fan-out's lock
        committing.commit()
    await asyncio.wait_for(unsubscribe, 10)
    assert deliveries(db) == 0


@pytest.mark.parametrize(
    ("call", "phrase"),
    [
        (lambda d: d.subscribe("bad group", TOPIC), "consumer group"),
        (lambda d: d.subscribe(GROUP, "RMQ_SYS_TRACE"), "reserved"),
        (lambda d: d.subscribe(GROUP, TOPIC, "TagA ||"), "empty tag"),
        (lambda d: d.subscribe(GROUP, TOPIC, "TagA || *"), "cannot be combined"),
        (lambda d: d.subscribe(GROUP, TOPIC, "A | B"), "'|'"),
        (lambda d: d.subscribe(GROUP, TOPIC, max_delivery_attempts=0), "max delivery attempts"),
        (lambda d: d.receive(GROUP, max_messages=0), "max messages"),
        (lambda d: d.receive(GROUP, max_messages=1001), "max messages"),
        (lambda d: d.receive(GROUP, invisible_seconds=0), "invisible duration"),
        (lambda d: d.receive(GROUP, invisible_seconds=float("nan")), "invisible duration"),
        (lambda d: d.receive(GROUP, invisible_seconds=86400), "at most 43200"),
        (lambda d: d.receive(GROUP, wait_seconds=-1), "wait time"),
        (lambda d: d.receive(GROUP, wait_seconds=61), "wait time"),
        (lambda d: d.ack(GROUP, "not-a-handle"), "receipt handle"),
        (lambda d: d.ack_batch(GROUP, []), "at least one"),
        (lambda d: d.change_invisible_duration(GROUP, "1.x", 5), "receipt handle"),
        (lambda d: d.dead_letters(GROUP, limit=0), "limit"),
    ],
)
async def test_bad_input_is_refused_with_a_sentence(
    subscribed: Coordinator, call: Callable, phrase: str
) -> None:
    with pytest.raises(InvalidMessage, match=phrase.replace("|", r"\|").replace("*", r"\*")):
        await call(subscribed.delivery)


async def test_a_waiting_receive_without_a_notifier_polls(subscribed: Coordinator) -> None:
    core = subscribed
    core.delivery.poll_interval_seconds = 0.05
    waiting = asyncio.create_task(receive(core, wait_seconds=20))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await commit(core, b"late")
    assert bodies(await asyncio.wait_for(waiting, 15)) == [b"late"]


async def test_a_receive_with_nothing_to_get_returns_empty_after_its_wait(
    subscribed: Coordinator,
) -> None:
    assert await receive(subscribed, wait_seconds=0.2) == []


@pytest.fixture
async def listening(database_url: str, settings: Settings) -> AsyncIterator[Coordinator]:
    async with Coordinator.connect(database_url, settings, listen=True) as core:
        yield core


async def test_a_long_poll_is_woken_by_a_commit_in_another_connection(
    listening: Coordinator, database_url: str
) -> None:
    core = listening
    await core.delivery.subscribe(GROUP, TOPIC)
    # Never poll again on its own within this test: only a notification wakes it.
    core.delivery.poll_interval_seconds = 3600
    sent = await core.transactions.prepare(half(body=b"woken"))
    waiting = asyncio.create_task(receive(core, wait_seconds=60))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    with psycopg.connect(database_url, autocommit=True) as other:
        other.execute(
            "UPDATE messages SET state = 'committed', resolved_at = now() WHERE id = %s",
            (sent.offset,),
        )
    received = await asyncio.wait_for(waiting, 20)
    assert bodies(received) == [b"woken"]


async def test_a_long_poll_of_another_group_is_not_woken(listening: Coordinator) -> None:
    core = listening
    await core.delivery.subscribe(GROUP, TOPIC)
    await core.delivery.subscribe(OTHER_GROUP, "payments")
    core.delivery.poll_interval_seconds = 3600
    waiting = asyncio.create_task(receive(core, OTHER_GROUP, wait_seconds=0.8))
    await asyncio.sleep(0.2)
    await commit(core)
    assert await asyncio.wait_for(waiting, 20) == []


async def test_a_fifo_ack_wakes_a_receiver_waiting_for_the_next_message(
    listening: Coordinator,
) -> None:
    core = listening
    await core.delivery.subscribe(GROUP, TOPIC, fifo=True)
    core.delivery.poll_interval_seconds = 3600
    await commit(core, b"first", message_group="order-1")
    await commit(core, b"second", message_group="order-1")
    (head,) = await receive(core)
    waiting = asyncio.create_task(receive(core, wait_seconds=60))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    await core.delivery.ack(GROUP, head.receipt_handle)
    assert bodies(await asyncio.wait_for(waiting, 20)) == [b"second"]
