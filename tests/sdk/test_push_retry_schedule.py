"""PushConsumer backs off between redeliveries of a message its listener fails on.

RocketMQ waits 10 s, 30 s, 1 min, 2 min, ... 2 h before its 16 retries; the
SDK's push consumers follow a schedule like it (RocketMQ's by default), by
the delivery attempt that failed. Here with a short schedule whose delays
differ enough that each wait shows which delay it followed: a wait is at
least its delay (the message is invisible that long) and less than the next
one (generous: the receive loop finds a message up to a second after it is
visible again).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

import pytest

from coordinator.client import (
    ROCKETMQ_RETRY_SCHEDULE,
    AsyncPushConsumer,
    ConsumeResult,
    Message,
    PushConsumer,
    ReceivedMessage,
    RetrySchedule,
    TransactionProducer,
)
from tests.conftest import LiveServer
from tests.sdk.conftest import eventually
from tests.sdk.test_producer import COMMIT, GROUP, ScriptedListener

SCHEDULE = (0.5, 3.0, 6.0)
ATTEMPTS = 4  # the first delivery and one retry after each delay


class Deliveries:
    """When each delivery attempt of the failing message arrived."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.arrived: dict[int, float] = {}

    def record(self, message: ReceivedMessage) -> ConsumeResult:
        with self._lock:
            self.arrived.setdefault(message.delivery_attempt, time.monotonic())
        return ConsumeResult.FAILURE

    def waits(self) -> list[float]:
        at = [self.arrived[attempt] for attempt in range(1, ATTEMPTS + 1)]
        return [later - earlier for earlier, later in itertools.pairwise(at)]


def _send_one(url: str) -> None:
    with TransactionProducer(GROUP, ScriptedListener(), url) as producer:
        producer.listener.execute = COMMIT  # type: ignore[attr-defined]
        producer.send_message_in_transaction(Message("orders", "cannot be processed"))


def _assert_waits_follow(waits: list[float]) -> None:
    bounds = zip(SCHEDULE, (*SCHEDULE[1:], SCHEDULE[-1] + 10.0), strict=True)
    for wait, (delay, next_delay) in zip(waits, bounds, strict=True):
        assert delay <= wait < next_delay, (waits, SCHEDULE)


def test_push_consumer_waits_longer_before_each_redelivery(server: LiveServer) -> None:
    deliveries = Deliveries()
    with PushConsumer(
        "retrying",
        {"orders": "*"},
        deliveries.record,
        server.url,
        retry_schedule=SCHEDULE,
        wait_seconds=1,
    ):
        _send_one(server.url)
        eventually(lambda: ATTEMPTS in deliveries.arrived, timeout=60)
    _assert_waits_follow(deliveries.waits())


@pytest.mark.anyio
async def test_async_push_consumer_waits_longer_before_each_redelivery(
    server: LiveServer,
) -> None:
    deliveries = Deliveries()

    async def on_message(message: ReceivedMessage) -> ConsumeResult:
        return deliveries.record(message)

    async with AsyncPushConsumer(
        "retrying",
        {"orders": "*"},
        on_message,
        server.url,
        retry_schedule=SCHEDULE,
        wait_seconds=1,
    ):
        await asyncio.to_thread(_send_one, server.url)
        for _ in range(600):
            if ATTEMPTS in deliveries.arrived:
                break
            await asyncio.sleep(0.1)
    _assert_waits_follow(deliveries.waits())


def test_the_default_schedule_is_rocketmqs() -> None:
    minutes = [delay / 60 for delay in ROCKETMQ_RETRY_SCHEDULE]
    assert minutes == [1 / 6, 1 / 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 30, 60, 120]
    consumer = PushConsumer("g", {"orders": "*"}, lambda m: None)
    assert consumer.retry_schedule.delays == ROCKETMQ_RETRY_SCHEDULE
    schedule = RetrySchedule(ROCKETMQ_RETRY_SCHEDULE)
    assert [schedule.delay_after(n) for n in (1, 2, 16, 17, 40)] == [10, 30, 7200, 7200, 7200]


@pytest.mark.parametrize("schedule", [[], [0], [-1.0], [5, 12 * 3600 + 1]])
def test_a_schedule_without_usable_delays_is_refused(schedule: list[float]) -> None:
    with pytest.raises(ValueError, match="retry"):
        PushConsumer("g", {"orders": "*"}, lambda m: None, retry_schedule=schedule)
