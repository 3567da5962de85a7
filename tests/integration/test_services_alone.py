"""The core's services work alone: built from a CoreContext and a config of their own,
never from a Coordinator nor the Settings.

Each service takes the pool (and the notifier and stop signal) in a
`CoreContext` and the few values it reads in its own frozen config; the check-back
rounds also take the function that ends a transaction, the scheduler the round it
runs. Each is built here without the object that composes them in production,
with a config written out by hand.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from coordinator.core.auth import Authenticator
from coordinator.core.checkback.registry import ProducerRegistry
from coordinator.core.checkback.rounds import CheckRounds
from coordinator.core.checkback.scheduler import CheckScheduler, running_check_scheduler
from coordinator.core.configs import (
    AuthConfig,
    CheckBackConfig,
    DeliveryConfig,
    LimitsConfig,
    OverviewConfig,
    SchedulerConfig,
    TransactionsConfig,
)
from coordinator.core.context import CoreContext
from coordinator.core.delivery import Delivery
from coordinator.core.inspection import Inspection
from coordinator.core.overview import OverviewReader
from coordinator.core.tokens import Tokens
from coordinator.core.transactions import Transactions
from coordinator.db.pool import CoordinatorPool
from coordinator.domain.access import Grants
from coordinator.domain.checkback import RoundResult
from coordinator.domain.errors import InvalidMessage
from coordinator.domain.messages import EndRequest, EndResult
from coordinator.domain.states import MessageState, Resolution
from tests.checkback_helpers import INSTANCE, make_due
from tests.factories import GROUP, TOPIC, end, half
from tests.push_receiver import PushReceiver

pytestmark = pytest.mark.anyio


@pytest.fixture
async def context(database_url: str) -> AsyncIterator[CoreContext]:
    pool = CoordinatorPool(database_url, min_size=1, max_size=4, timeout=3.0)
    await pool.open(wait=True)
    try:
        yield CoreContext(pool)
    finally:
        await pool.close()


TRANSACTIONS = TransactionsConfig(
    max_batch_size=10,
    max_body_bytes=64,
    max_properties_bytes=256,
    max_check_immunity_seconds=600.0,
    reject_transactional_messages=False,
    transaction_timeout_seconds=6.0,
    group_commit_max_batch=50,
    group_commit_max_inflight=1,
    group_commit_linger_seconds=0.0,
    max_delay_seconds=3600.0,
)
CHECK_BACK = CheckBackConfig(
    producer_ttl_seconds=30.0,
    producer_forget_seconds=3600.0,
    retention_hours=72.0,
    check_batch_size=200,
    check_max=3,
    check_interval_seconds=0.3,
    check_backoff=False,
    check_backoff_factor=2.0,
    check_backoff_max_seconds=3600.0,
    check_push_timeout_seconds=5.0,
    max_inflight_dispatches=4,
    max_long_poll_seconds=60.0,
    check_poll_fallback_seconds=0.1,
    max_check_answer_bytes=4096,
    check_push_secret=None,
    check_source_key="alone",
    check_source_key_file=Path("unused.key"),
)


def _insert_half_message(db: psycopg.Connection) -> int:
    # Stored as the prepare statement would, without the Coordinator that runs it.
    (offset,) = db.execute(
        "INSERT INTO messages (message_id, transaction_id, kind, producer_group, topic, body,"
        " state, next_check_at) VALUES ('alone-1', 'tx-alone-1', 'transactional', %s, %s,"
        " 'x', 'prepared', now()) RETURNING id",
        (GROUP, TOPIC),
    ).fetchone()
    return offset


async def test_delivery_works_from_its_context_alone(context: CoreContext) -> None:
    delivery = Delivery(
        context,
        DeliveryConfig(
            max_long_poll_seconds=5.0, max_subscriptions_per_group=4, max_metric_label_values=10
        ),
    )
    subscribed = await delivery.subscribe("billing", TOPIC, "created || paid")
    assert subscribed.created and subscribed.subscription.tags == ("created", "paid")
    assert [s.topic for s in await delivery.subscriptions("billing")] == [TOPIC]
    assert await delivery.receive("billing") == []
    # Its config bounds the long polls it serves.
    with pytest.raises(InvalidMessage, match="at most 5 seconds"):
        await delivery.receive("billing", wait_seconds=6)


async def test_transactions_work_from_their_context_and_config_alone(
    context: CoreContext,
) -> None:
    transactions = Transactions(context, TRANSACTIONS)
    sent = await transactions.prepare(half(check_immunity_seconds=600))
    ended = await transactions.end(end(sent.transaction_id, Resolution.COMMIT))
    assert ended.state is MessageState.COMMITTED
    (normal,) = await transactions.send_batch([half(producer_group=None)])
    assert normal.state is MessageState.COMMITTED
    # Its config holds the message rules' bounds.
    with pytest.raises(InvalidMessage, match="at most 64"):
        await transactions.prepare(half(body=b"x" * 65))
    with pytest.raises(InvalidMessage, match="at most 600 s"):
        await transactions.prepare(half(check_immunity_seconds=601))
    with pytest.raises(InvalidMessage, match="at most 10 messages"):
        await transactions.prepare_batch([half() for _ in range(11)])
    inspection = Inspection(context)
    assert (await inspection.get_message(offset=sent.offset)).state is MessageState.COMMITTED
    assert await inspection.database_ok()


async def test_tokens_overview_and_authenticator_work_alone(context: CoreContext) -> None:
    created = await Tokens(context).create("alone", Grants(admin=True))
    overview = await OverviewReader(
        context,
        OverviewConfig(
            producer_ttl_seconds=30.0, idle_consumer_group_hours=1.0, retention_enabled=False
        ),
    ).read(0)
    assert overview.pending == 0
    limits = LimitsConfig(rate_limit_per_second=0, rate_limit_burst=1, max_long_polls_per_token=1)
    config = AuthConfig(token_refresh_seconds=60.0, open_allowed=True, limits=limits)
    authenticator = Authenticator(context, config)
    await authenticator.refresh()
    assert authenticator.authenticate(f"Bearer {created.token}").name == "alone"


async def test_check_back_hands_pushed_answers_to_the_end_function_it_was_given(
    context: CoreContext, db: psycopg.Connection
) -> None:
    ended: list[EndRequest] = []

    async def end(request: EndRequest) -> EndResult:
        ended.append(request)
        return EndResult(
            offset=offset,
            message_id="alone-1",
            transaction_id=request.transaction_id,
            state=MessageState.COMMITTED,
            changed=True,
        )

    producers = ProducerRegistry(context, CHECK_BACK)
    rounds = CheckRounds(context, CHECK_BACK, end)
    offset = _insert_half_message(db)
    with PushReceiver(lambda _: (200, {"resolution": "commit"})) as receiver:
        await producers.heartbeat(GROUP, INSTANCE, receiver.url)
        make_due(db, offset)
        result = await rounds.run_round()
        await rounds.settle()
    assert result.pushed == 1 and result.resolved_by_push == 1
    assert [(r.transaction_id, r.producer_group, r.from_check) for r in ended] == [
        ("tx-alone-1", GROUP, True)
    ]


async def test_the_scheduler_runs_the_round_it_was_given() -> None:
    rounds = asyncio.Event()

    async def run_round() -> RoundResult:
        rounds.set()
        return RoundResult()

    scheduler = CheckScheduler(run_round, interval_seconds=0.05)
    scheduler.start()
    try:
        await asyncio.wait_for(rounds.wait(), timeout=10)
    finally:
        await scheduler.stop()


async def test_a_disabled_scheduler_runs_nothing() -> None:
    async def run_round() -> RoundResult:
        raise AssertionError("a disabled scheduler ran a round")

    config = SchedulerConfig(check_scheduler_enabled=False, check_scan_interval_seconds=0.01)
    async with running_check_scheduler(run_round, config) as scheduler:
        await asyncio.sleep(0.1)
    assert scheduler is None
