"""AsyncTransactionProducer: the asyncio twin of TransactionProducer."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from coordinator.client import _protocol as protocol
from coordinator.client._protocol import RetryPolicy
from coordinator.client._transport import AsyncTransport
from coordinator.client.errors import CoordinatorClientError
from coordinator.client.listener import AsyncTransactionListener
from coordinator.client.message import LocalTransactionState, Message, SendResult
from coordinator.client.producer import DEFAULT_ENDPOINT

log = logging.getLogger(__name__)


class AsyncTransactionProducer:
    """Same protocol and flow as TransactionProducer, with async listener methods."""

    def __init__(
        self,
        group: str,
        listener: AsyncTransactionListener,
        endpoint: str = DEFAULT_ENDPOINT,
        *,
        instance_id: str | None = None,
        max_concurrent_checks: int = 4,
        heartbeat_interval: float = 10.0,
        check_wait_seconds: float = 2.0,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.group = group
        self.listener = listener
        self.endpoint = endpoint
        self.instance_id = instance_id or uuid.uuid4().hex[:16]
        self.max_concurrent_checks = max_concurrent_checks
        self.heartbeat_interval = heartbeat_interval
        self.check_wait_seconds = check_wait_seconds
        self.timeout = timeout
        self.retry = retry
        self._transport: AsyncTransport | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._checks: set[asyncio.Task[None]] = set()
        self._check_slots = asyncio.Semaphore(max_concurrent_checks)

    async def start(self) -> AsyncTransactionProducer:
        if self._transport is not None:
            return self
        self._transport = AsyncTransport(self.endpoint, timeout=self.timeout, retry=self.retry)
        await self._transport.call(protocol.heartbeat_call(self.group, self.instance_id))
        self._tasks = [
            asyncio.create_task(self._heartbeat_loop(), name=f"heartbeat-{self.group}"),
            asyncio.create_task(self._check_loop(), name=f"checks-{self.group}"),
        ]
        return self

    async def shutdown(self) -> None:
        if self._transport is None:
            return
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self._checks:  # let answers already being computed finish
            await asyncio.gather(*self._checks, return_exceptions=True)
        try:
            await self._transport.call(protocol.leave_call(self.group, self.instance_id))
        except CoordinatorClientError as error:
            log.info("could not deregister producer instance: %s", error)
        await self._transport.close()
        self._transport = None

    async def __aenter__(self) -> AsyncTransactionProducer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    @property
    def _client(self) -> AsyncTransport:
        if self._transport is None:
            raise CoordinatorClientError("the producer is not started: call start() first")
        return self._transport

    async def send_message_in_transaction(self, msg: Message, arg: Any = None) -> SendResult:
        answer = await self._client.call(protocol.prepare_call(self.group, msg))
        half = protocol.read_send(msg, answer)
        try:
            state = protocol.as_state(await self.listener.execute_local_transaction(msg, arg))
        except Exception:
            log.exception(
                "local transaction of %s raised; leaving it to check-back", msg.message_id
            )
            state = LocalTransactionState.UNKNOWN
        await self._end(msg, state, from_check=False)
        return protocol.with_local_state(half, state)

    async def send(self, msg: Message) -> SendResult:
        return protocol.read_send(msg, await self._client.call(protocol.send_call(msg)))

    async def _end(self, msg: Message, state: LocalTransactionState, *, from_check: bool) -> None:
        assert msg.transaction_id is not None
        try:
            await self._client.call(
                protocol.end_call(
                    self.group,
                    msg.transaction_id,
                    state,
                    message_id=msg.message_id,
                    from_check=from_check,
                )
            )
        except CoordinatorClientError as error:
            log.warning(
                "could not end transaction %s with %s (left to check-back): %s",
                msg.transaction_id,
                state.value,
                error,
            )

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            try:
                await self._client.call(protocol.heartbeat_call(self.group, self.instance_id))
            except CoordinatorClientError as error:
                log.warning("heartbeat failed: %s", error)

    async def _check_loop(self) -> None:
        while True:
            try:
                answer = await self._client.call(
                    protocol.poll_checks_call(
                        self.group, self.instance_id, self.check_wait_seconds, self.timeout
                    )
                )
            except CoordinatorClientError as error:
                log.warning("polling check requests failed: %s", error)
                await asyncio.sleep(1.0)
                continue
            for request in protocol.check_requests(answer):
                await self._check_slots.acquire()
                task = asyncio.create_task(self._answer_check(request))
                self._checks.add(task)
                task.add_done_callback(self._checks.discard)

    async def _answer_check(self, msg: Message) -> None:
        try:
            try:
                state = protocol.as_state(await self.listener.check_local_transaction(msg))
            except Exception:
                log.exception("check_local_transaction of %s raised", msg.message_id)
                state = LocalTransactionState.UNKNOWN
            await self._end(msg, state, from_check=True)
        finally:
            self._check_slots.release()
