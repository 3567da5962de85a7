"""The transactions service: prepare and send messages, end transactions.

Single prepares, sends and ends are group-committed (group_commit.py):
concurrent requests share one database transaction. Batches go in a
transaction of their own. Storing is in producing.py, ending in ending.py.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace
from typing import Any

from psycopg import AsyncConnection

from coordinator.core import ending, producing, recall
from coordinator.core.configs import TransactionsConfig
from coordinator.core.context import CoreContext
from coordinator.core.group_commit import CommitSlots, GroupCommitter, Item, Result, RunBatch
from coordinator.core.ids import new_message_id
from coordinator.domain.delivery_time import RecallHandle
from coordinator.domain.errors import CoordinatorError, NotFound
from coordinator.domain.messages import (
    EndRequest,
    EndResult,
    NewMessage,
    RecallResult,
    SendResult,
)
from coordinator.domain.states import Resolution


class Transactions:
    def __init__(self, context: CoreContext, config: TransactionsConfig) -> None:
        self._context = context
        self._config = config
        # Prepares, sends and ends share their transactions in flight: each
        # kind's requests gather while another kind's batch commits.
        self._slots = CommitSlots(config.group_commit_max_inflight)
        self._prepares = self._group_committer(self._inserter(transactional=True))
        self._sends = self._group_committer(self._inserter(transactional=False))
        self._ends = self._group_committer(
            functools.partial(ending.end_validated, meter=context.meter),
            key=lambda request: request.transaction_id,
        )

    async def prepare(self, message: NewMessage) -> SendResult:
        """Store a half message; returns once it is durably committed."""
        (message,) = producing.validate_batch([message], self._config, transactional=True)
        return await self._prepares.submit(_with_message_id(message))

    async def prepare_batch(self, messages: Sequence[NewMessage]) -> list[SendResult]:
        async with self._context.pool.connection() as conn:
            return await producing.store_messages(conn, messages, self._config, transactional=True)

    async def send(self, message: NewMessage) -> SendResult:
        """Store a normal message: committed (deliverable) at once."""
        (message,) = producing.validate_batch([message], self._config, transactional=False)
        return await self._sends.submit(_with_message_id(message))

    async def send_batch(self, messages: Sequence[NewMessage]) -> list[SendResult]:
        async with self._context.pool.connection() as conn:
            return await producing.store_messages(conn, messages, self._config, transactional=False)

    async def end(self, request: EndRequest) -> EndResult:
        ending.validate_end(request)
        if request.resolution is Resolution.UNKNOWN:
            async with self._context.pool.connection() as conn:
                return await ending.report_unknown(conn, request, self._context.meter)
        return await self._ends.submit(request)

    async def end_batch(self, requests: Sequence[EndRequest]) -> list[EndResult | CoordinatorError]:
        """End many transactions in one database transaction; one outcome per request.

        Unlike a batch of half messages this is not all-or-nothing: each
        request is its own compare-and-set and gets its own answer or error.
        """
        async with self._context.pool.connection() as conn, conn.transaction():
            return await ending.end_many(
                conn, requests, self._config.max_batch_size, self._context.meter
            )

    async def recall(self, recall_handle: str, *, topic: str | None = None) -> RecallResult:
        """Take back a delayed message before its delivery time (its recall handle).

        The caller must be allowed to produce to `recall_topic(recall_handle)`;
        `topic`, when given, must be the handle's.
        """
        handle = RecallHandle.decode(recall_handle)
        if topic is not None and topic != handle.topic:
            raise NotFound(f"the recall handle is not one of topic {topic!r}")
        async with self._context.pool.connection() as conn:
            return await recall.recall(conn, handle)

    def _inserter(self, *, transactional: bool) -> RunBatch[NewMessage, SendResult]:
        async def run(
            conn: AsyncConnection[Any], messages: list[NewMessage]
        ) -> list[SendResult | CoordinatorError]:
            return await producing.insert_validated(
                conn, messages, self._config, transactional=transactional
            )

        return run

    def _group_committer(
        self, run: RunBatch[Item, Result], key: Callable[[Item], Hashable] | None = None
    ) -> GroupCommitter[Item, Result]:
        return GroupCommitter(
            self._context.pool,
            run,
            max_batch=self._config.group_commit_max_batch,
            key=key,
            slots=self._slots,
            linger_seconds=self._config.group_commit_linger_seconds,
        )


def recall_topic(recall_handle: str) -> str:
    """The topic a recall handle names: the caller must be allowed to produce to it."""
    return RecallHandle.decode(recall_handle).topic


def _with_message_id(message: NewMessage) -> NewMessage:
    # The id is minted before the message joins a group-commit batch, so that
    # a batch run again (one request at a time after a failed batch, whose
    # connection may have died after its COMMIT) stores each message once.
    if message.message_id is not None:
        return message
    return replace(message, message_id=new_message_id())
