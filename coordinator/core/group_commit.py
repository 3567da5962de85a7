"""Group commit: concurrent single requests share one database transaction.

Every prepare or end is one small transaction whose cost is mostly fixed
(round trips, a WAL flush, per-statement work). Requests that arrive while a
batch is being committed wait in a queue and go together in the next batch,
so under load the cost is paid once per batch; with no load a request goes
alone at once, adding no latency. Each caller is answered only after the
transaction holding its request committed, with its own result or error.

Committers of several kinds of request (prepares, sends, ends) may share
their transactions in flight (`CommitSlots`): each kind's requests then
gather while another kind's batch commits. Under concurrent load a batch
may also linger briefly to be as large as the previous one of its kind
(`linger_seconds`); a lone caller never waits for it.

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

from coordinator.db.pool import RETRY_ADVICE, CoordinatorPool
from coordinator.domain.errors import CoordinatorError, DatabaseUnavailable

log = logging.getLogger(__name__)

Item = TypeVar("Item")
Result = TypeVar("Result")
RunBatch = Callable[
    [AsyncConnection[Any], list[Item]], Awaitable[list["Result | CoordinatorError"]]
]


class CommitSlots:
    """The transactions in flight at once that several group committers share.

    Committers of different kinds of request (half messages, ends) that share
    slots take turns: while one kind's batch commits, the other kinds' requests
    wait and go in bigger batches, so a door whose loop is busy pays for fewer,
    larger transactions. A committer waiting for a slot is served in turn
    (first come, first served), so no kind starves another.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.used = 0
        self._waiting: deque[GroupCommitter[Any, Any]] = deque()

    def wait(self, committer: GroupCommitter[Any, Any]) -> None:
        if committer not in self._waiting:
            self._waiting.append(committer)

    def release(self) -> None:
        self.used -= 1
        while self._waiting and self.used < self.size:
            self._waiting.popleft()._start_batches()


class GroupCommitter(Generic[Item, Result]):
    def __init__(
        self,
        pool: CoordinatorPool,
        run: RunBatch[Item, Result],
        *,
        max_batch: int,
        max_inflight: int = 1,
        key: Callable[[Item], Hashable] | None = None,
        slots: CommitSlots | None = None,
        linger_seconds: float = 0.0,
    ) -> None:
        self.pool = pool
        self.run = run
        self.max_batch = max_batch
        # Transactions in flight at once: this committer's own, or shared with others.
        self.slots = slots if slots is not None else CommitSlots(max_inflight)
        # Items with the same key never share a batch (one statement must not
        # touch the same row twice); the later one waits for the next batch.
        self.key = key
        # Under concurrent load a batch may wait this long for as many requests
        # as the last batch held (see _start_batches).
        self.linger_seconds = linger_seconds
        self._last_size = 0
        self._gathered: asyncio.Future[None] | None = None
        self._gather_target = 0
        self._queue: deque[tuple[Item, asyncio.Future[Result | CoordinatorError]]] = deque()
        self._inflight: set[asyncio.Task[None]] = set()
        self.batches = 0  # for benchmarks and tests: how many transactions ran
        self.items = 0

    async def submit(self, item: Item) -> Result:
        future: asyncio.Future[Result | CoordinatorError] = (
            asyncio.get_running_loop().create_future()
        )
        self._queue.append((item, future))
        gathered = self._gathered
        if gathered is not None and len(self._queue) >= self._gather_target:
            if not gathered.done():
                gathered.set_result(None)
        else:
            self._start_batches()
        try:
            # Bounded like a request on a connection of its own: a caller
            # queued behind a batch stuck on an unanswering server is answered
            # at its deadline, not after every batch ahead of it gave up.
            async with asyncio.timeout(self.pool.deadline):
                outcome = await future
        except TimeoutError:
            # The future is cancelled with the wait: a batch not yet taken
            # skips this request; one that holds it may still commit it, which
            # leaves the outcome unknown to the caller, as a lost connection does.
            raise DatabaseUnavailable(
                f"PostgreSQL did not commit the request within {self.pool.deadline:g} s "
                f"(database_deadline_seconds). {RETRY_ADVICE}"
            ) from None
        if isinstance(outcome, CoordinatorError):
            raise outcome
        return outcome

    def _start_batches(self) -> None:
        slots = self.slots
        while self._queue and slots.used < slots.size:
            slots.used += 1
            # Concurrent callers (the last batch held several) come at a rate that
            # filled that batch while it committed; the next one waits, briefly,
            # to be as large, rather than going with whoever is here already.
            # Fewer, larger transactions cost the process and the database less;
            # a lone caller (batches of one) never waits.
            target = min(self._last_size, self.max_batch)
            if self.linger_seconds > 0 and target > 1 and len(self._queue) < target:
                task = asyncio.create_task(self._gather_and_commit(target))
            else:
                task = asyncio.create_task(self._commit(self._take_batch()))
            self._inflight.add(task)
            task.add_done_callback(self._finished)
        if self._queue:
            slots.wait(self)

    async def _gather_and_commit(self, target: int) -> None:
        self._gather_target = target
        self._gathered = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(self.linger_seconds):
                await self._gathered
        except TimeoutError:
            pass
        finally:
            self._gathered = None
        await self._commit(self._take_batch())

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        if self._queue:
            # Behind any other kind already waiting: the kinds take turns.
            self.slots.wait(self)
        self.slots.release()

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
        self._last_size = len(items)
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
