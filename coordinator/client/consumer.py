"""Consumers: SimpleConsumer (receive / ack / change invisible duration) and
PushConsumer (a listener per message on a worker pool), sync and asyncio.

Both follow RocketMQ 5: a received message stays invisible to the rest of the
consumer group for its invisible duration; acking it by receipt handle ends
its delivery; a message not acked in time is delivered again, with a higher
delivery attempt, until the subscription's max delivery attempts send it to
the group's dead-letter queue.

Long on purpose: each sync class stands next to its asyncio twin, so that a
change to one is seen beside the other (as in producer.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from enum import StrEnum
from functools import partial
from typing import Any, Generic, TypeVar

from coordinator.client import _base as base
from coordinator.client import _protocol as protocol
from coordinator.client._retry import RetryPolicy
from coordinator.client._transport import AsyncTransport, SyncTransport
from coordinator.client.filters import Filter, Sql92
from coordinator.client.message import ReceivedMessage

log = logging.getLogger(__name__)


class ConsumeResult(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"


# RocketMQ's consumer retry delays (messageDelayLevel levels 3 to 18, 16
# retries): how long a message a listener failed on stays away before it is
# delivered again, after its first failed attempt, its second, ...; the last
# delay holds for any attempt after those.
ROCKETMQ_RETRY_SCHEDULE: tuple[float, ...] = (
    10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
)  # fmt: skip
# The coordinator's longest invisible duration, which a delay becomes.
LONGEST_RETRY_DELAY_SECONDS = 12 * 3600.0


class RetrySchedule:
    """The wait before each redelivery of a message whose listener failed, by attempt."""

    def __init__(self, delays: Sequence[float]) -> None:
        self.delays = tuple(float(delay) for delay in delays)
        if not self.delays:
            raise ValueError("a retry schedule needs at least one delay")
        for delay in self.delays:
            if not 0 < delay <= LONGEST_RETRY_DELAY_SECONDS:
                raise ValueError(
                    f"a retry delay must be more than 0 and at most "
                    f"{LONGEST_RETRY_DELAY_SECONDS:g} seconds, got {delay:g}"
                )

    def delay_after(self, delivery_attempt: int) -> float:
        """The wait after attempt `delivery_attempt` (1 for the first delivery) failed."""
        return self.delays[min(max(delivery_attempt, 1), len(self.delays)) - 1]


MessageListener = Callable[[ReceivedMessage], "ConsumeResult | None"]
AsyncMessageListener = Callable[[ReceivedMessage], Awaitable["ConsumeResult | None"]]


class _ConsumerSettings:
    """A consumer's configuration and the calls it makes, shared by both flavours."""

    def __init__(
        self,
        group: str,
        subscriptions: dict[str, Filter],
        *,
        fifo: bool,
        max_delivery_attempts: int,
        invisible_seconds: float,
        wait_seconds: float,
        timeout: float,
    ) -> None:
        if not subscriptions:
            raise ValueError("a consumer needs at least one subscription: {topic: expression}")
        self.group = group
        self.subscriptions = dict(subscriptions)
        self.fifo = fifo
        self.max_delivery_attempts = max_delivery_attempts
        self.invisible_seconds = invisible_seconds
        self.wait_seconds = wait_seconds
        self.timeout = timeout

    def subscribe_calls(self) -> list[protocol.Call]:
        return [
            protocol.subscribe_call(
                self.group,
                topic,
                expression.expression if isinstance(expression, Sql92) else expression,
                filter_type="sql92" if isinstance(expression, Sql92) else None,
                fifo=self.fifo,
                max_delivery_attempts=self.max_delivery_attempts,
            )
            for topic, expression in self.subscriptions.items()
        ]

    def receive_call(
        self, max_messages: int, invisible_seconds: float | None, wait_seconds: float | None
    ) -> protocol.Call:
        return protocol.receive_call(
            self.group,
            max_messages=max_messages,
            invisible_seconds=invisible_seconds or self.invisible_seconds,
            wait_seconds=self.wait_seconds if wait_seconds is None else wait_seconds,
            timeout=self.timeout,
        )

    def ack_call(self, message: ReceivedMessage | str) -> protocol.Call:
        handle = message if isinstance(message, str) else message.receipt_handle
        return protocol.ack_call(self.group, handle)

    def change_invisible_call(
        self, message: ReceivedMessage, invisible_seconds: float
    ) -> protocol.Call:
        return protocol.change_invisible_call(self.group, message.receipt_handle, invisible_seconds)


class _Consumer(base.Connected[base.T]):
    """What both SimpleConsumer flavours are configured with."""

    role = "consumer"

    def __init__(
        self,
        group: str,
        subscriptions: dict[str, Filter],
        endpoint: str = base.DEFAULT_ENDPOINT,
        *,
        fifo: bool = False,
        max_delivery_attempts: int = 16,
        invisible_seconds: float = 30.0,
        wait_seconds: float = 20.0,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        token: str | None = None,
    ) -> None:
        super().__init__(endpoint, timeout=timeout, retry=retry, token=token)
        self.settings = _ConsumerSettings(
            group,
            subscriptions,
            fifo=fifo,
            max_delivery_attempts=max_delivery_attempts,
            invisible_seconds=invisible_seconds,
            wait_seconds=wait_seconds,
            timeout=timeout,
        )


class SimpleConsumer(_Consumer[SyncTransport], base.SyncLifecycle):
    """Receive, process, ack: the caller drives every step.

    `subscriptions` maps topics to tag expressions (`*`, `TagA || TagB`) or
    `Sql92` filters; the group is subscribed on start().
    """

    _transport_class = SyncTransport

    def start(self) -> SimpleConsumer:
        if self._transport is None:
            transport = self._connect()
            try:
                for call in self.settings.subscribe_calls():
                    transport.call(call)
            except BaseException:
                self._disconnect().close()
                raise
        return self

    def shutdown(self) -> None:
        if self._transport is not None:
            self._stop_retrying()
            self._transport.close()
            self._transport = None

    def receive(
        self,
        max_messages: int = 16,
        *,
        invisible_seconds: float | None = None,
        wait_seconds: float | None = None,
    ) -> list[ReceivedMessage]:
        call = self.settings.receive_call(max_messages, invisible_seconds, wait_seconds)
        return protocol.received(self._client.call(call))

    def ack(self, message: ReceivedMessage | str) -> None:
        self._client.call(self.settings.ack_call(message))

    def change_invisible_duration(
        self, message: ReceivedMessage, invisible_seconds: float
    ) -> ReceivedMessage:
        """Keep (or give back) a message; returns it with its new receipt handle."""
        answer = self._client.call(self.settings.change_invisible_call(message, invisible_seconds))
        return protocol.with_receipt(message, answer)


class AsyncSimpleConsumer(_Consumer[AsyncTransport], base.AsyncLifecycle):
    """The asyncio twin of SimpleConsumer."""

    _transport_class = AsyncTransport

    async def start(self) -> AsyncSimpleConsumer:
        if self._transport is None:
            transport = self._connect()
            try:
                for call in self.settings.subscribe_calls():
                    await transport.call(call)
            except BaseException:
                await self._disconnect().close()
                raise
        return self

    async def shutdown(self) -> None:
        if self._transport is not None:
            self._stop_retrying()
            await self._transport.close()
            self._transport = None

    async def receive(
        self,
        max_messages: int = 16,
        *,
        invisible_seconds: float | None = None,
        wait_seconds: float | None = None,
    ) -> list[ReceivedMessage]:
        call = self.settings.receive_call(max_messages, invisible_seconds, wait_seconds)
        return protocol.received(await self._client.call(call))

    async def ack(self, message: ReceivedMessage | str) -> None:
        await self._client.call(self.settings.ack_call(message))

    async def change_invisible_duration(
        self, message: ReceivedMessage, invisible_seconds: float
    ) -> ReceivedMessage:
        answer = await self._client.call(
            self.settings.change_invisible_call(message, invisible_seconds)
        )
        return protocol.with_receipt(message, answer)


def _succeeded(outcome: object) -> bool:
    # None counts as success, like a void listener that did not raise.
    return outcome is None or outcome == ConsumeResult.SUCCESS or outcome is True


C = TypeVar("C", SimpleConsumer, AsyncSimpleConsumer)
ML = TypeVar("ML", MessageListener, AsyncMessageListener)


class _PushConsumer(Generic[C, ML]):
    """What both PushConsumer flavours share: their simple consumer, their
    listener and their slots."""

    _consumer_class: type[C]
    _slots: threading.Semaphore | asyncio.Semaphore  # one per message being consumed
    consumer: C
    listener: ML

    def __init__(
        self,
        group: str,
        subscriptions: dict[str, Filter],
        listener: ML,
        endpoint: str,
        retry_schedule: Sequence[float],
        consumer_options: dict[str, Any],
    ) -> None:
        self.retry_schedule = RetrySchedule(retry_schedule)
        self.consumer = self._consumer_class(group, subscriptions, endpoint, **consumer_options)
        self.listener = listener

    def _release(self, count: int) -> None:
        for _ in range(count):
            self._slots.release()

    def _retry_delay(self, message: ReceivedMessage) -> float:
        delay = self.retry_schedule.delay_after(message.delivery_attempt)
        log.info(
            "message %s failed (delivery attempt %d): delivered again in %g s",
            message.message_id,
            message.delivery_attempt,
            delay,
        )
        return delay


_listening = partial(base.survive_errors, log, "listener failed on message %s")
# The message comes back after its invisible duration anyway.
_settling = partial(base.survive_call_errors, log.warning, "could not settle message %s")
_receiving = partial(base.survive_call_errors, log.warning, "receive failed")


class PushConsumer(_PushConsumer[SimpleConsumer, MessageListener], base.SyncLifecycle):
    """Runs `listener(message)` for every message on a worker pool.

    Success (no exception; SUCCESS or None) acks the message. Failure (an
    exception or FAILURE) hands it back to be delivered again, with a higher
    delivery attempt, after the delay `retry_schedule` gives for the attempt
    that failed (RocketMQ's 10 s, 30 s, 1 min, 2 min, ... 2 h by default).
    After the subscription's max delivery attempts it goes to the group's
    dead letters.
    """

    _consumer_class = SimpleConsumer
    _slots: threading.Semaphore

    def __init__(
        self,
        group: str,
        subscriptions: dict[str, Filter],
        listener: MessageListener,
        endpoint: str = base.DEFAULT_ENDPOINT,
        *,
        threads: int = 4,
        retry_schedule: Sequence[float] = ROCKETMQ_RETRY_SCHEDULE,
        **consumer_options: Any,
    ) -> None:
        super().__init__(group, subscriptions, listener, endpoint, retry_schedule, consumer_options)
        self.threads = threads
        self._stopping = threading.Event()
        self._slots = threading.Semaphore(threads)
        self._pool: ThreadPoolExecutor | None = None
        self._loop: threading.Thread | None = None

    def start(self) -> PushConsumer:
        if self._loop is None:
            self.consumer.start()
            self._stopping.clear()
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="push-consumer")
            self._loop = threading.Thread(target=self._receive_loop, daemon=True)
            self._loop.start()
        return self

    def shutdown(self) -> None:
        if self._loop is None:
            return
        self._stopping.set()
        # Settling messages gives up instead of waiting out an outage: an
        # unsettled message comes back after its invisible duration.
        self.consumer._stop_retrying()
        self._loop.join()
        self._loop = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)  # finish messages already being consumed
        self.consumer.shutdown()

    def _receive_loop(self) -> None:
        # Short waits keep shutdown prompt; the server long-polls within each.
        wait = min(self.consumer.settings.wait_seconds, 2.0)
        while not self._stopping.is_set():
            free = self._free_slots()
            with _receiving() as receiving:
                messages = self.consumer.receive(free, wait_seconds=wait)
            if receiving.failed:
                self._release(free)
                self._stopping.wait(1.0)
                continue
            self._release(free - len(messages))
            for message in messages:
                assert self._pool is not None
                self._pool.submit(self._consume, message)

    def _free_slots(self) -> int:
        self._slots.acquire()  # at least one worker is free
        taken = 1
        while taken < self.threads and self._slots.acquire(blocking=False):
            taken += 1
        return taken

    def _consume(self, message: ReceivedMessage) -> None:
        try:
            ok = False
            with _listening(message.message_id):
                ok = _succeeded(self.listener(message))
            with _settling(message.message_id):
                if ok:
                    self.consumer.ack(message)
                else:
                    self.consumer.change_invisible_duration(message, self._retry_delay(message))
        finally:
            self._slots.release()


class AsyncPushConsumer(
    _PushConsumer[AsyncSimpleConsumer, AsyncMessageListener], base.AsyncLifecycle
):
    """The asyncio twin of PushConsumer: `await listener(message)` per message."""

    _consumer_class = AsyncSimpleConsumer
    _slots: asyncio.Semaphore

    def __init__(
        self,
        group: str,
        subscriptions: dict[str, Filter],
        listener: AsyncMessageListener,
        endpoint: str = base.DEFAULT_ENDPOINT,
        *,
        concurrency: int = 4,
        retry_schedule: Sequence[float] = ROCKETMQ_RETRY_SCHEDULE,
        **consumer_options: Any,
    ) -> None:
        super().__init__(group, subscriptions, listener, endpoint, retry_schedule, consumer_options)
        self.concurrency = concurrency
        self._loop: asyncio.Task[None] | None = None
        self._slots = asyncio.Semaphore(concurrency)
        self._running: set[asyncio.Task[None]] = set()

    async def start(self) -> AsyncPushConsumer:
        if self._loop is None:
            await self.consumer.start()
            self._loop = asyncio.create_task(self._receive_loop())
        return self

    async def shutdown(self) -> None:
        if self._loop is None:
            return
        self.consumer._stop_retrying()  # as PushConsumer.shutdown
        self._loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._loop
        self._loop = None
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        await self.consumer.shutdown()

    async def _receive_loop(self) -> None:
        while True:
            free = await self._free_slots()
            with _receiving() as receiving:
                messages = await self.consumer.receive(free)
            if receiving.failed:
                self._release(free)
                await asyncio.sleep(1.0)
                continue
            self._release(free - len(messages))
            for message in messages:
                base.spawn(self._running, self._consume(message))

    async def _free_slots(self) -> int:
        await self._slots.acquire()  # at least one task slot is free
        taken = 1
        while taken < self.concurrency and not self._slots.locked():
            await self._slots.acquire()
            taken += 1
        return taken

    async def _consume(self, message: ReceivedMessage) -> None:
        try:
            ok = False
            with _listening(message.message_id):
                ok = _succeeded(await self.listener(message))
            with _settling(message.message_id):
                if ok:
                    await self.consumer.ack(message)
                else:
                    await self.consumer.change_invisible_duration(
                        message, self._retry_delay(message)
                    )
        finally:
            self._slots.release()
