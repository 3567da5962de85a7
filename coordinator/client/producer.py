"""TransactionProducer and its asyncio twin AsyncTransactionProducer:
RocketMQ's transactional producer over the coordinator's HTTP API."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Generic, TypedDict, TypeVar, Unpack

from coordinator.client import _base as base
from coordinator.client import _protocol as protocol
from coordinator.client._base import DEFAULT_ENDPOINT
from coordinator.client._retry import RetryPolicy
from coordinator.client._transport import AsyncTransport, SyncTransport
from coordinator.client.barrier import DEFAULT_TABLE as DEFAULT_BARRIER_TABLE
from coordinator.client.listener import AsyncTransactionListener, TransactionListener
from coordinator.client.message import LocalTransactionState, Message, RecallResult, SendResult

log = logging.getLogger(__name__)

L = TypeVar("L", TransactionListener, AsyncTransactionListener)


class _ProducerOptions(TypedDict, total=False):
    """The options both producers take (see _Producer)."""

    instance_id: str | None
    heartbeat_interval: float
    check_wait_seconds: float
    timeout: float
    retry: RetryPolicy | None
    token: str | None


class _Producer(base.Connected[base.T], Generic[base.T, L]):
    """What both producers are configured with and the calls they make."""

    role = "producer"
    listener: L

    def __init__(
        self,
        group: str,
        listener: L,
        endpoint: str,
        *,
        instance_id: str | None = None,
        heartbeat_interval: float = 10.0,
        check_wait_seconds: float = 2.0,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        token: str | None = None,
    ) -> None:
        super().__init__(endpoint, timeout=timeout, retry=retry, token=token)
        self.group = group
        self.listener = listener
        self.instance_id = instance_id or uuid.uuid4().hex[:16]
        self.heartbeat_interval = heartbeat_interval
        self.check_wait_seconds = check_wait_seconds

    def _heartbeat_call(self) -> protocol.Call:
        return protocol.heartbeat_call(self.group, self.instance_id)

    def _leave_call(self) -> protocol.Call:
        return protocol.leave_call(self.group, self.instance_id)

    def _poll_call(self) -> protocol.Call:
        return protocol.poll_checks_call(
            self.group, self.instance_id, self.check_wait_seconds, self.timeout
        )

    def _end_call(
        self, msg: Message, state: LocalTransactionState, *, from_check: bool
    ) -> protocol.Call:
        assert msg.transaction_id is not None
        return protocol.end_call(
            self.group, msg.transaction_id, state, message_id=msg.message_id, from_check=from_check
        )


# A listener that raises answers UNKNOWN: the coordinator checks back.
_executing = partial(
    base.survive_errors, log, "local transaction of %s raised; leaving it to check-back"
)
_checking = partial(base.survive_errors, log, "check_local_transaction of %s raised")
# The local transaction may have committed, so a failed end is never raised:
# check-back finishes the job.
_ending = partial(
    base.survive_call_errors,
    log.warning,
    "could not end transaction %s with %s (left to check-back)",
)
_heartbeating = partial(base.survive_call_errors, log.warning, "heartbeat failed")
_polling = partial(base.survive_call_errors, log.warning, "polling check requests failed")
# The instance expires on its own once it stops heartbeating.
_leaving = partial(base.survive_call_errors, log.info, "could not deregister producer instance")


class TransactionProducer(_Producer[SyncTransport, TransactionListener], base.SyncLifecycle):
    """Sends half messages, runs the local transaction, ends it; answers check-backs.

    While started, a background thread heartbeats the producer instance and
    long-polls its check requests (no HTTP server is needed in the producer);
    `check_local_transaction` runs on a bounded thread pool and each answer
    ends the transaction with from_check.
    """

    _transport_class = SyncTransport

    def __init__(
        self,
        group: str,
        listener: TransactionListener,
        endpoint: str = DEFAULT_ENDPOINT,
        *,
        check_threads: int = 4,
        **options: Unpack[_ProducerOptions],
    ) -> None:
        super().__init__(group, listener, endpoint, **options)
        self.check_threads = check_threads
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._checks: ThreadPoolExecutor | None = None

    # lifecycle -----------------------------------------------------------
    def start(self) -> TransactionProducer:
        if self._transport is not None:
            return self
        transport = self._connect()
        self._stopping.clear()
        try:
            transport.call(self._heartbeat_call())
        except BaseException:
            self._disconnect().close()
            raise
        self._checks = ThreadPoolExecutor(
            max_workers=self.check_threads, thread_name_prefix=f"checks-{self.group}"
        )
        for target, name in ((self._heartbeat_loop, "heartbeat"), (self._check_loop, "checks")):
            thread = threading.Thread(target=target, name=f"{name}-{self.group}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def shutdown(self) -> None:
        if self._transport is None:
            return
        self._stopping.set()
        self._stop_retrying()
        for thread in self._threads:
            thread.join(timeout=self.check_wait_seconds + self.timeout)
        self._threads.clear()
        if self._checks is not None:
            self._checks.shutdown(wait=True)
        with _leaving():
            self._transport.call(self._leave_call())
        self._transport.close()
        self._transport = None

    # sending -------------------------------------------------------------
    def send_message_in_transaction(self, msg: Message, arg: Any = None) -> SendResult:
        """The seeds' sendMessageInTransaction, step by step.

        1. Store the half message. If that fails, raise: the local transaction
           never runs.
        2. Run the local transaction; an exception or None means UNKNOWN.
        3. End the transaction. A failure here is logged, never raised: the
           local transaction may have committed, and check-back will finish.
        """
        half = protocol.read_send(msg, self._client.call(protocol.prepare_call(self.group, msg)))
        state = LocalTransactionState.UNKNOWN
        with _executing(msg.message_id):
            state = protocol.as_state(self.listener.execute_local_transaction(msg, arg))
        self._end(msg, state, from_check=False)
        return protocol.with_local_state(half, state)

    def send(self, msg: Message) -> SendResult:
        """A normal (non-transactional) message."""
        return protocol.read_send(msg, self._client.call(protocol.send_call(msg)))

    def recall(self, recall_handle: str) -> RecallResult:
        """Take back a message sent with a delivery time, before that time
        (its SendResult's recall_handle). Raises StateConflict once it was delivered."""
        return protocol.read_recall(self._client.call(protocol.recall_call(recall_handle)))

    def _end(self, msg: Message, state: LocalTransactionState, *, from_check: bool) -> None:
        with _ending(msg.transaction_id, state.value):
            self._client.call(self._end_call(msg, state, from_check=from_check))

    # check source ------------------------------------------------------------
    def set_check_source(
        self,
        database_url: str,
        *,
        barrier_table: str = DEFAULT_BARRIER_TABLE,
        mode: str = "fallback",
    ) -> None:
        """Let this group's database answer its check-backs with the barrier (see Barrier).

        The coordinator connects to `database_url` (a libpq URL; a role that may
        only INSERT into and SELECT from `barrier_table`) and settles the group's
        half messages itself: mode "fallback" while no instance of the group is
        live, "only" always. Works before start() too. Raises InvalidRequest
        for a refused URL, table or mode.
        """
        self._call_any_time(
            protocol.set_check_source_call(self.group, database_url, barrier_table, mode)
        )

    def remove_check_source(self) -> None:
        """Live instances answer the group's check-backs again; idempotent."""
        self._call_any_time(protocol.remove_check_source_call(self.group))

    def _call_any_time(self, call: protocol.Call) -> None:
        if self._transport is not None:
            self._transport.call(call)
            return
        transport = self._own_transport()
        try:
            transport.call(call)
        finally:
            transport.close()

    # check-backs -----------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        while not self._stopping.wait(self.heartbeat_interval):
            with _heartbeating():
                self._client.call(self._heartbeat_call())

    def _check_loop(self) -> None:
        while not self._stopping.is_set():
            with _polling() as polling:
                requests = protocol.check_requests(self._client.call(self._poll_call()))
            if polling.failed:
                self._stopping.wait(1.0)
                continue
            for request in requests:
                assert self._checks is not None
                self._checks.submit(self._answer_check, request)

    def _answer_check(self, msg: Message) -> None:
        state = LocalTransactionState.UNKNOWN
        with _checking(msg.message_id):
            state = protocol.as_state(self.listener.check_local_transaction(msg))
        self._end(msg, state, from_check=True)


class AsyncTransactionProducer(
    _Producer[AsyncTransport, AsyncTransactionListener], base.AsyncLifecycle
):
    """The asyncio twin of TransactionProducer: same protocol and flow, with
    async listener methods; check-backs run as at most `max_concurrent_checks`
    tasks."""

    _transport_class = AsyncTransport

    def __init__(
        self,
        group: str,
        listener: AsyncTransactionListener,
        endpoint: str = DEFAULT_ENDPOINT,
        *,
        max_concurrent_checks: int = 4,
        **options: Unpack[_ProducerOptions],
    ) -> None:
        super().__init__(group, listener, endpoint, **options)
        self.max_concurrent_checks = max_concurrent_checks
        self._tasks: list[asyncio.Task[None]] = []
        self._checks: set[asyncio.Task[None]] = set()
        self._check_slots = asyncio.Semaphore(max_concurrent_checks)

    async def start(self) -> AsyncTransactionProducer:
        if self._transport is not None:
            return self
        try:
            await self._connect().call(self._heartbeat_call())
        except BaseException:
            await self._disconnect().close()
            raise
        self._tasks = [
            asyncio.create_task(self._heartbeat_loop(), name=f"heartbeat-{self.group}"),
            asyncio.create_task(self._check_loop(), name=f"checks-{self.group}"),
        ]
        return self

    async def shutdown(self) -> None:
        if self._transport is None:
            return
        self._stop_retrying()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self._checks:  # let answers already being computed finish
            await asyncio.gather(*self._checks, return_exceptions=True)
        with _leaving():
            await self._transport.call(self._leave_call())
        await self._transport.close()
        self._transport = None

    async def send_message_in_transaction(self, msg: Message, arg: Any = None) -> SendResult:
        answer = await self._client.call(protocol.prepare_call(self.group, msg))
        half = protocol.read_send(msg, answer)
        state = LocalTransactionState.UNKNOWN
        with _executing(msg.message_id):
            state = protocol.as_state(await self.listener.execute_local_transaction(msg, arg))
        await self._end(msg, state, from_check=False)
        return protocol.with_local_state(half, state)

    async def send(self, msg: Message) -> SendResult:
        return protocol.read_send(msg, await self._client.call(protocol.send_call(msg)))

    async def recall(self, recall_handle: str) -> RecallResult:
        return protocol.read_recall(await self._client.call(protocol.recall_call(recall_handle)))

    async def set_check_source(
        self,
        database_url: str,
        *,
        barrier_table: str = DEFAULT_BARRIER_TABLE,
        mode: str = "fallback",
    ) -> None:
        """TransactionProducer.set_check_source, awaited."""
        await self._call_any_time(
            protocol.set_check_source_call(self.group, database_url, barrier_table, mode)
        )

    async def remove_check_source(self) -> None:
        """TransactionProducer.remove_check_source, awaited."""
        await self._call_any_time(protocol.remove_check_source_call(self.group))

    async def _call_any_time(self, call: protocol.Call) -> None:
        if self._transport is not None:
            await self._transport.call(call)
            return
        transport = self._own_transport()
        try:
            await transport.call(call)
        finally:
            await transport.close()

    async def _end(self, msg: Message, state: LocalTransactionState, *, from_check: bool) -> None:
        with _ending(msg.transaction_id, state.value):
            await self._client.call(self._end_call(msg, state, from_check=from_check))

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            with _heartbeating():
                await self._client.call(self._heartbeat_call())

    async def _check_loop(self) -> None:
        while True:
            with _polling() as polling:
                requests = protocol.check_requests(await self._client.call(self._poll_call()))
            if polling.failed:
                await asyncio.sleep(1.0)
                continue
            for request in requests:
                await self._check_slots.acquire()
                base.spawn(self._checks, self._answer_check(request))

    async def _answer_check(self, msg: Message) -> None:
        try:
            state = LocalTransactionState.UNKNOWN
            with _checking(msg.message_id):
                state = protocol.as_state(await self.listener.check_local_transaction(msg))
            await self._end(msg, state, from_check=True)
        finally:
            self._check_slots.release()
