"""Pushes in flight: each check-back push is a task of its own, apart from the round.

A round claims due messages and hands its pushes over here, then ends. A
check URL that answers slowly, or never (until check_push_timeout_seconds),
so holds back only its own pushes: the next rounds claim, and push to other
producers, meanwhile. Bounds per node: at most `max_inflight` pushes at
once, and at most a quarter of them (`per_url_limit`) to any one check URL,
so a hanging URL leaves the other slots to the others.

A message whose push is waiting for a slot or in flight here is in
`in_flight()`; the round's claim leaves those messages alone until their
push is done, so a slow URL is never sent the same message twice at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

# The share of the node's push slots one check URL may hold.
PER_URL_SHARE = 4


def per_url_limit(max_inflight: int) -> int:
    return max(1, max_inflight // PER_URL_SHARE)


@dataclass(slots=True)
class _UrlSlots:
    slots: asyncio.Semaphore
    users: int = 0  # pushes queued or running for this URL; forgotten at 0


class PushDispatcher:
    """Runs pushes as background tasks, bounded per check URL and overall."""

    def __init__(self, max_inflight: int) -> None:
        self._slots = asyncio.Semaphore(max_inflight)
        self._per_url = per_url_limit(max_inflight)
        self._urls: dict[str, _UrlSlots] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}  # by message offset
        self._closing = False

    def in_flight(self) -> list[int]:
        """The message offsets whose push is queued or running."""
        return list(self._tasks)

    def submit(
        self, offset: int, url: str, push: Callable[[], Awaitable[None]]
    ) -> asyncio.Task[None] | None:
        """Start pushing message `offset` to `url`; None when closing or it is already here."""
        if self._closing or offset in self._tasks:
            return None
        task = asyncio.create_task(self._run(url, push), name=f"check-back-push-{offset}")
        self._tasks[offset] = task
        task.add_done_callback(lambda done: self._forget(offset, done))
        return task

    async def settle(self) -> None:
        """Wait until no push is queued or in flight (pushes started meanwhile too)."""
        while self._tasks:
            await asyncio.wait(list(self._tasks.values()))

    async def close(self, finish_seconds: float) -> None:
        """No new pushes; the running ones get `finish_seconds`, then are cancelled.

        Pushes still waiting for a slot are not sent: their check requests
        stay `pending` until the message's next check, like those of a
        node that stopped between claim and push.
        """
        self._closing = True
        tasks = list(self._tasks.values())
        if not tasks:
            return
        _, unfinished = await asyncio.wait(tasks, timeout=finish_seconds)
        if unfinished:
            log.warning(
                "%d check-back pushes still unanswered after %g s: cancelled",
                len(unfinished),
                finish_seconds,
            )
            for task in unfinished:
                task.cancel()
            await asyncio.gather(*unfinished, return_exceptions=True)

    async def _run(self, url: str, push: Callable[[], Awaitable[None]]) -> None:
        limited = self._urls.get(url)
        if limited is None:
            limited = self._urls[url] = _UrlSlots(asyncio.Semaphore(self._per_url))
        limited.users += 1
        try:
            # The URL's slot first: pushes queued behind a slow URL hold none of the others'.
            async with limited.slots, self._slots:
                if not self._closing:
                    await push()
        finally:
            limited.users -= 1
            if limited.users == 0:
                del self._urls[url]

    def _forget(self, offset: int, task: asyncio.Task[None]) -> None:
        if self._tasks.get(offset) is task:
            del self._tasks[offset]
        if not task.cancelled() and task.exception() is not None:
            # push() answers every failure of the producer's side itself
            log.error("check-back push failed", exc_info=task.exception())
