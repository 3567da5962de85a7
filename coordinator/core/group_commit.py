"""Group commit: concurrent single requests share one database transaction.

Every prepare or end is one small transaction whose cost is mostly fixed
(round trips, a WAL flush, per-statement work). Requests that arrive while a
batch is being committed wait in a queue and go together in the next batch,
so under load the cost is paid once per batch; with no load a request goes
alone at once, adding no latency. Each caller is answered only after the
transaction holding its request committed, with its own result or error.

A batch function must write with a single statement (the pool's connections
are in autocommit mode, so that statement is the whole transaction); reads
after it, such as the lookup of idempotent retries, see its committed rows.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

from psycopg import AsyncConnection

from coordinator.db.pool import CoordinatorPool
from coordinator.domain.errors import CoordinatorError, DatabaseUnavailable

log = logging.getLogger(__name__)

Item = TypeVar("Item")
Result = TypeVar("Result")
RunBatch = Callable[
    [AsyncConnection[Any], list[Item]], Awaitable[list["Result | CoordinatorError"]]
]


class GroupCommitter(Generic[Item, Result]):
    def __init__(
        self,
        pool: CoordinatorPool,
        run: RunBatch[Item, Result],
        *,
        max_batch: int,
        max_inflight: int,
        key: Callable[[Item], Hashable] | None = None,
    ) -> None:
        self.pool = pool
        self.run = run
        self.max_batch = max_batch
        self.max_inflight = max_inflight
        # Items with the same key never share a batch (one statement must not
        # touch the same row twice); the later one waits for the next batch.
        self.key = key
        self._queue: deque[tuple[Item, asyncio.Future[Result | CoordinatorError]]] = deque()
        self._inflight: set[asyncio.Task[None]] = set()
        self.batches = 0  # for benchmarks and tests: how many transactions ran
        self.items = 0

    async def submit(self, item: Item) -> Result:
        future: asyncio.Future[Result | CoordinatorError] = (
            asyncio.get_running_loop().create_future()
        )
        self._queue.append((item, future))
        self._start_batches()
        outcome = await future
        if isinstance(outcome, CoordinatorError):
            raise outcome
        return outcome

    def _start_batches(self) -> None:
        while self._queue and len(self._inflight) < self.max_inflight:
            batch = self._take_batch()
            task = asyncio.create_task(self._commit(batch))
            self._inflight.add(task)
            task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        self._start_batches()

    def _take_batch(self) -> list[tuple[Item, asyncio.Future[Result | CoordinatorError]]]:
        batch: list[tuple[Item, asyncio.Future[Result | CoordinatorError]]] = []
        keys: set[Hashable] = set()
        deferred = []
        while self._queue and len(batch) < self.max_batch:
            entry = self._queue.popleft()
            if entry[1].done():  # the caller went away (e.g. cancelled request)
                continue
            if self.key is not None:
                key = self.key(entry[0])
                if key in keys:
                    deferred.append(entry)
                    continue
                keys.add(key)
            batch.append(entry)
        self._queue.extendleft(reversed(deferred))
        return batch

    async def _commit(
        self, batch: list[tuple[Item, asyncio.Future[Result | CoordinatorError]]]
    ) -> None:
        if not batch:
            return
        try:
            outcomes = await self._run_batch([item for item, _ in batch])
        except Exception as error:
            if len(batch) == 1:
                _settle(batch[0][1], error=error)
                return
            if isinstance(error, DatabaseUnavailable):
                # Retrying one by one would make each request wait for the
                # database in turn (a batch of 100 times the pool timeout).
                # Every caller gets the answer now and may send it again: a
                # request that carries its message id (the SDK mints them
                # before sending) is answered as a repeat if the batch did
                # commit before its connection broke.
                for _, future in batch:
                    _settle(future, error=DatabaseUnavailable(error.message))
                return
            # One bad apple (or a deadlock) must not fail its neighbours: retry
            # each request in a transaction of its own.
            log.warning(
                "group commit of %d requests failed (%s); retrying one by one", len(batch), error
            )
            for entry in batch:
                await self._commit([entry])
            return
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            _settle(future, result=outcome)

    async def _run_batch(self, items: list[Item]) -> list[Result | CoordinatorError]:
        # `run` does all its writes in ONE statement, which autocommit makes
        # one transaction: no BEGIN/COMMIT round trips on the hot path.
        async with self.pool.connection() as conn:
            outcomes = await self.run(conn, items)
        self.batches += 1
        self.items += len(items)
        return outcomes


def _settle(
    future: asyncio.Future[Any], *, result: object = None, error: BaseException | None = None
) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
