"""The node's lifetime: what starts in which order, and what stops it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Protocol

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.core.auth import Authenticator, running_authenticator
from coordinator.core.checkback.scheduler import running_check_scheduler
from coordinator.core.retention.scheduler import running_retention
from coordinator.logs import flush_access_lines
from coordinator.metrics import Meter, process_registry


class ServingDoor(Protocol):
    """What a started door gives the node."""

    # Finishes only if the door stops by itself (its server failed): the node stops then.
    @property
    def ended(self) -> Awaitable[None]: ...

    def hurry(self) -> None:
        """Stop waiting for the requests in flight (asked twice to stop)."""


# A door: given the core and the authenticator, serves until its context exits.
Door = Callable[[Coordinator, Authenticator], AbstractAsyncContextManager[ServingDoor]]


class Node:
    """A started node: its core, and the way to stop it."""

    def __init__(self, core: Coordinator, doors: list[ServingDoor]) -> None:
        self.core = core
        self.doors = doors
        self._stop_asked = asyncio.Event()

    @property
    def stopping(self) -> bool:
        return self._stop_asked.is_set()

    def stop(self) -> None:
        """Ask the node to stop: the doors finish the requests in flight."""
        self._stop_asked.set()

    def hurry(self) -> None:
        """Stop, without waiting for the requests in flight."""
        self._stop_asked.set()
        for door in self.doors:
            door.hurry()

    async def serve(self) -> None:
        """Until stop() is called, or a door ends by itself."""
        stop_asked = asyncio.ensure_future(self._stop_asked.wait())
        ended = [asyncio.ensure_future(door.ended) for door in self.doors]
        try:
            await asyncio.wait([stop_asked, *ended], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_asked.cancel()
        for door in ended:
            if door.done() and not door.cancelled() and (error := door.exception()) is not None:
                raise error


@asynccontextmanager
async def running_node(
    database_url: str, settings: Settings, doors: Sequence[Door]
) -> AsyncIterator[Node]:
    """Start the pool and the core, the authenticator, the check-back and retention
    jobs, then each door; on exit stop them in the reverse order.

    The core begins to stop before the doors do, so the long polls a door
    holds answer at once and its requests in flight finish.
    """
    async with (
        # A serving process's /metrics shows its process and Python figures too.
        Coordinator.connect(
            database_url, settings, listen=True, meter=Meter(process_registry())
        ) as core,
        running_authenticator(core.context, core.configs.auth) as authenticator,
        running_check_scheduler(core.checkback.rounds.run_round, core.configs.scheduler),
        running_retention(core.retention.run_round, core.configs.retention),
        AsyncExitStack() as serving,
    ):
        # First in, so last out: once every door answered its last request,
        # the access lines still waiting for their batch (logs.py) are written.
        serving.callback(flush_access_lines)
        started = [await serving.enter_async_context(door(core, authenticator)) for door in doors]
        # Last in, so first out: before any door stops.
        serving.callback(core.begin_shutdown)
        yield Node(core, started)
