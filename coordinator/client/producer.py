"""TransactionProducer: RocketMQ's transactional producer over the coordinator's HTTP API."""

from __future__ import annotations

import logging
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from coordinator.client import _protocol as protocol
from coordinator.client._protocol import RetryPolicy
from coordinator.client._transport import SyncTransport
from coordinator.client.errors import CoordinatorClientError
from coordinator.client.listener import TransactionListener
from coordinator.client.message import LocalTransactionState, Message, SendResult

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "http://127.0.0.1:8080"


class TransactionProducer:
    """Sends half messages, runs the local transaction, ends it; answers check-backs.

    While started, a background thread heartbeats the producer instance and
    long-polls its check requests (no HTTP server is needed in the producer);
    `check_local_transaction` runs on a bounded thread pool and each answer
    ends the transaction with from_check.
    """

    def __init__(
        self,
        group: str,
        listener: TransactionListener,
        endpoint: str = DEFAULT_ENDPOINT,
        *,
        instance_id: str | None = None,
        check_threads: int = 4,
        heartbeat_interval: float = 10.0,
        check_wait_seconds: float = 2.0,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.group = group
        self.listener = listener
        self.endpoint = endpoint
        self.instance_id = instance_id or uuid.uuid4().hex[:16]
        self.check_threads = check_threads
        self.heartbeat_interval = heartbeat_interval
        self.check_wait_seconds = check_wait_seconds
        self.timeout = timeout
        self.retry = retry
        self._transport: SyncTransport | None = None
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._checks: ThreadPoolExecutor | None = None

    # lifecycle -----------------------------------------------------------
    def start(self) -> TransactionProducer:
        if self._transport is not None:
            return self
        self._transport = SyncTransport(self.endpoint, timeout=self.timeout, retry=self.retry)
        self._stopping.clear()
        self._transport.call(protocol.heartbeat_call(self.group, self.instance_id))
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
        for thread in self._threads:
            thread.join(timeout=self.check_wait_seconds + self.timeout)
        self._threads.clear()
        if self._checks is not None:
            self._checks.shutdown(wait=True)
        try:
            self._transport.call(protocol.leave_call(self.group, self.instance_id))
        except CoordinatorClientError as error:
            log.info("could not deregister producer instance: %s", error)
        self._transport.close()
        self._transport = None

    def __enter__(self) -> TransactionProducer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def _client(self) -> SyncTransport:
        if self._transport is None:
            raise CoordinatorClientError("the producer is not started: call start() first")
        return self._transport

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
        try:
            state = protocol.as_state(self.listener.execute_local_transaction(msg, arg))
        except Exception:
            log.exception(
                "local transaction of %s raised; leaving it to check-back", msg.message_id
            )
            state = LocalTransactionState.UNKNOWN
        self._end(msg, state, from_check=False)
        return protocol.with_local_state(half, state)

    def send(self, msg: Message) -> SendResult:
        """A normal (non-transactional) message."""
        return protocol.read_send(msg, self._client.call(protocol.send_call(msg)))

    def _end(self, msg: Message, state: LocalTransactionState, *, from_check: bool) -> None:
        assert msg.transaction_id is not None
        try:
            self._client.call(
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

    # check-backs -----------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        while not self._stopping.wait(self.heartbeat_interval):
            try:
                self._client.call(protocol.heartbeat_call(self.group, self.instance_id))
            except CoordinatorClientError as error:
                log.warning("heartbeat failed: %s", error)

    def _check_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                answer = self._client.call(
                    protocol.poll_checks_call(
                        self.group, self.instance_id, self.check_wait_seconds, self.timeout
                    )
                )
            except CoordinatorClientError as error:
                log.warning("polling check requests failed: %s", error)
                self._stopping.wait(1.0)
                continue
            for request in protocol.check_requests(answer):
                assert self._checks is not None
                self._checks.submit(self._answer_check, request)

    def _answer_check(self, msg: Message) -> None:
        try:
            state = protocol.as_state(self.listener.check_local_transaction(msg))
        except Exception:
            log.exception("check_local_transaction of %s raised", msg.message_id)
            state = LocalTransactionState.UNKNOWN
        self._end(msg, state, from_check=True)
