"""Consumers: SimpleConsumer (receive / ack / change invisible duration) and
PushConsumer (a listener per message on a worker pool), sync and asyncio.

Both follow RocketMQ 5: a received message stays invisible to the rest of the
consumer group for its invisible duration; acking it by receipt handle ends
its delivery; a message not acked in time is delivered again, with a higher
delivery attempt, until the subscription's max delivery attempts send it to
the group's dead-letter queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from enum import StrEnum
from typing import Any

from coordinator.client import _protocol as protocol
from coordinator.client._protocol import RetryPolicy
from coordinator.client._transport import AsyncTransport, SyncTransport
from coordinator.client.errors import CoordinatorClientError
from coordinator.client.message import ReceivedMessage
from coordinator.client.producer import DEFAULT_ENDPOINT

log = logging.getLogger(__name__)


class ConsumeResult(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"


MessageListener = Callable[[ReceivedMessage], "ConsumeResult | None"]
AsyncMessageListener = Callable[[ReceivedMessage], Awaitable["ConsumeResult | None"]]


class _ConsumerSettings:
    def __init__(
        self,
        group: str,
        subscriptions: dict[str, str],
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
                expression,
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


def _handle(message: ReceivedMessage | str) -> str:
    return message if isinstance(message, str) else message.receipt_handle


class _Consumer:
    """What both SimpleConsumer flavours are configured with."""

    def __init__(
        self,
        group: str,
        subscriptions: dict[str, str],
        endpoint: str = DEFAULT_ENDPOINT,
        *,
        fifo: bool = False,
        max_delivery_attempts: int = 16,
        invisible_seconds: float = 30.0,
        wait_seconds: float = 20.0,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.settings = _ConsumerSettings(
            group,
            subscriptions,
            fifo=fifo,
            max_delivery_attempts=max_delivery_attempts,
            invisible_seconds=invisible_seconds,
            wait_seconds=wait_seconds,
            timeout=timeout,
        )
        self.endpoint = endpoint
        self.retry = retry


class SimpleConsumer(_Consumer):
    """Receive, process, ack: the caller drives every step.

    `subscriptions` maps topics to tag expressions (`*`, `TagA || TagB`); the
    group is subscribed on start().
    """

    _transport: SyncTransport | None = None

    def start(self) -> SimpleConsumer:
        if self._transport is None:
            self._transport = SyncTransport(
                self.endpoint, timeout=self.settings.timeout, retry=self.retry
            )
            for call in self.settings.subscribe_calls():
                self._transport.call(call)
        return self

    def shutdown(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def __enter__(self) -> SimpleConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def _client(self) -> SyncTransport:
        if self._transport is None:
            raise CoordinatorClientError("the consumer is not started: call start() first")
        return self._transport

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
        self._client.call(protocol.ack_call(self.settings.group, _handle(message)))

    def change_invisible_duration(
        self, message: ReceivedMessage, invisible_seconds: float
    ) -> ReceivedMessage:
        """Keep (or give back) a message; returns it with its new receipt handle."""
        answer = self._client.call(
            protocol.change_invisible_call(
                self.settings.group, message.receipt_handle, invisible_seconds
            )
        )
        return protocol.with_receipt(message, answer)


class AsyncSimpleConsumer(_Consumer):
    """The asyncio twin of SimpleConsumer."""

    _transport: AsyncTransport | None = None

    async def start(self) -> AsyncSimpleConsumer:
        if self._transport is None:
            self._transport = AsyncTransport(
                self.endpoint, timeout=self.settings.timeout, retry=self.retry
            )
            for call in self.settings.subscribe_calls():
                await self._transport.call(call)
        return self

    async def shutdown(self) -> None:
        if self._transport is not None:
            await self._transport.close()
            self._transport = None

    async def __aenter__(self) -> AsyncSimpleConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    @property
    def _client(self) -> AsyncTransport:
        if self._transport is None:
            raise CoordinatorClientError("the consumer is not started: call start() first")
        return self._transport

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
        await self._client.call(protocol.ack_call(self.settings.group, _handle(message)))

    async def change_invisible_duration(
        self, message: ReceivedMessage, invisible_seconds: float
    ) -> ReceivedMessage:
        answer = await self._client.call(
            protocol.change_invisible_call(
                self.settings.group, message.receipt_handle, invisible_seconds
            )
        )
        return protocol.with_receipt(message, answer)


def _succeeded(outcome: object) -> bool:
    # None counts as success, like a void listener that did not raise.
    return outcome is None or outcome == ConsumeResult.SUCCESS or outcome is True


class PushConsumer:
    """Runs `listener(message)` for every message on a worker pool.

    Success (no exception; SUCCESS or None) acks the message. Failure (an
    exception or FAILURE) hands it back to be delivered again after
    `retry_delay_seconds`, with a higher delivery attempt.
    """

    def __init__(
        self,
        group: str,
        subscriptions: dict[str, str],
        listener: MessageListener,
        endpoint: str = DEFAULT_ENDPOINT,
        *,
        threads: int = 4,
        retry_delay_seconds: float = 1.0,
        **consumer_options: Any,
    ) -> None:
        self.consumer = SimpleConsumer(group, subscriptions, endpoint, **consumer_options)
        self.listener = listener
        self.threads = threads
        self.retry_delay_seconds = retry_delay_seconds
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
        self._loop.join()
        self._loop = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)  # finish messages already being consumed
        self.consumer.shutdown()

    def __enter__(self) -> PushConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _receive_loop(self) -> None:
        # Short waits keep shutdown prompt; the server long-polls within each.
        wait = min(self.consumer.settings.wait_seconds, 2.0)
        while not self._stopping.is_set():
            free = self._free_slots()
            try:
                messages = self.consumer.receive(free, wait_seconds=wait)
            except CoordinatorClientError as error:
                log.warning("receive failed: %s", error)
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

    def _release(self, count: int) -> None:
        for _ in range(count):
            self._slots.release()

    def _consume(self, message: ReceivedMessage) -> None:
        try:
            try:
                ok = _succeeded(self.listener(message))
            except Exception:
                log.exception("listener failed on message %s", message.message_id)
                ok = False
            if ok:
                self.consumer.ack(message)
            else:
                self.consumer.change_invisible_duration(message, self.retry_delay_seconds)
        except CoordinatorClientError as error:
            # The message will come back after its invisible duration anyway.
            log.warning("could not settle message %s: %s", message.message_id, error)
        finally:
            self._slots.release()


class AsyncPushConsumer:
    """The asyncio twin of PushConsumer: `await listener(message)` per message."""

    def __init__(
        self,
        group: str,
        subscriptions: dict[str, str],
        listener: AsyncMessageListener,
        endpoint: str = DEFAULT_ENDPOINT,
        *,
        concurrency: int = 4,
        retry_delay_seconds: float = 1.0,
        **consumer_options: Any,
    ) -> None:
        self.consumer = AsyncSimpleConsumer(group, subscriptions, endpoint, **consumer_options)
        self.listener = listener
        self.concurrency = concurrency
        self.retry_delay_seconds = retry_delay_seconds
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
        self._loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._loop
        self._loop = None
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        await self.consumer.shutdown()

    async def __aenter__(self) -> AsyncPushConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def _receive_loop(self) -> None:
        while True:
            await self._slots.acquire()
            free = 1
            while free < self.concurrency and not self._slots.locked():
                await self._slots.acquire()
                free += 1
            try:
                messages = await self.consumer.receive(free)
            except CoordinatorClientError as error:
                log.warning("receive failed: %s", error)
                for _ in range(free):
                    self._slots.release()
                await asyncio.sleep(1.0)
                continue
            for _ in range(free - len(messages)):
                self._slots.release()
            for message in messages:
                task = asyncio.create_task(self._consume(message))
                self._running.add(task)
                task.add_done_callback(self._running.discard)

    async def _consume(self, message: ReceivedMessage) -> None:
        try:
            try:
                ok = _succeeded(await self.listener(message))
            except Exception:
                log.exception("listener failed on message %s", message.message_id)
                ok = False
            if ok:
                await self.consumer.ack(message)
            else:
                await self.consumer.change_invisible_duration(message, self.retry_delay_seconds)
        except CoordinatorClientError as error:
            log.warning("could not settle message %s: %s", message.message_id, error)
        finally:
            self._slots.release()
