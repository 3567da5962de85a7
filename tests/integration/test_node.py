"""A node starts the core, then its doors as peers, and stops them in the reverse order."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from coordinator import logs
from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.core.auth import Authenticator
from coordinator.domain.errors import DoorFailed
from coordinator.node import Door, running_node

pytestmark = pytest.mark.anyio


class RecordingDoor:
    """A door that writes down what it saw; `ended` finishes if told to fail."""

    def __init__(self, name: str, events: list[str]) -> None:
        self.name = name
        self.events = events
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.hurried = False

    def hurry(self) -> None:
        self.hurried = True


def recording(name: str, events: list[str], doors: dict[str, RecordingDoor]) -> Door:
    @asynccontextmanager
    async def running(
        core: Coordinator, authenticator: Authenticator
    ) -> AsyncIterator[RecordingDoor]:
        # What a door receives is already started: the core answers, tokens are read.
        assert await core.inspection.database_ok()
        assert authenticator.enabled is False
        events.append(f"{name} started")
        door = doors[name] = RecordingDoor(name, events)
        try:
            yield door
        finally:
            events.append(f"{name} stopped, core stopping={core.stopping}")

    return running


async def test_doors_start_in_order_and_stop_in_reverse_after_the_core_began_to_stop(
    database_url: str,
) -> None:
    events: list[str] = []
    doors: dict[str, RecordingDoor] = {}
    settings = Settings(database_url=None, check_scheduler_enabled=False)
    async with running_node(
        database_url, settings, [recording("a", events, doors), recording("b", events, doors)]
    ) as node:
        assert [door.name for door in node.doors] == ["a", "b"]  # type: ignore[attr-defined]
        serving = asyncio.create_task(node.serve())
        await asyncio.sleep(0.05)
        assert not serving.done()
        node.stop()
        await asyncio.wait_for(serving, 10)
        assert not node.core.stopping  # the doors still serve until the node's context ends
    assert events == [
        "a started",
        "b started",
        "b stopped, core stopping=True",
        "a stopped, core stopping=True",
    ]


async def test_a_door_that_ends_by_itself_stops_the_node_with_its_error(database_url: str) -> None:
    events: list[str] = []
    doors: dict[str, RecordingDoor] = {}
    settings = Settings(database_url=None, check_scheduler_enabled=False)
    with pytest.raises(DoorFailed, match="gone"):
        async with running_node(
            database_url, settings, [recording("a", events, doors), recording("b", events, doors)]
        ) as node:
            doors["b"].ended.set_exception(DoorFailed("b is gone"))
            await asyncio.wait_for(node.serve(), 10)
    assert events[-2:] == ["b stopped, core stopping=True", "a stopped, core stopping=True"]


async def test_a_door_that_cannot_start_stops_the_doors_started_before_it(
    database_url: str,
) -> None:
    events: list[str] = []
    doors: dict[str, RecordingDoor] = {}

    @asynccontextmanager
    async def refusing(core: Coordinator, authenticator: Authenticator) -> AsyncIterator[object]:
        raise DoorFailed("cannot listen")
        yield  # pragma: no cover

    settings = Settings(database_url=None, check_scheduler_enabled=False)
    with pytest.raises(DoorFailed, match="cannot listen"):
        async with running_node(database_url, settings, [recording("a", events, doors), refusing]):
            pytest.fail("the node must not run without all its doors")
    assert events == ["a started", "a stopped, core stopping=False"]


async def test_hurry_reaches_every_door(database_url: str) -> None:
    events: list[str] = []
    doors: dict[str, RecordingDoor] = {}
    settings = Settings(database_url=None, check_scheduler_enabled=False)
    async with running_node(
        database_url, settings, [recording("a", events, doors), recording("b", events, doors)]
    ) as node:
        node.hurry()
        await asyncio.wait_for(node.serve(), 10)
    assert node.stopping
    assert doors["a"].hurried and doors["b"].hurried


async def test_access_lines_waiting_for_their_batch_are_written_when_the_node_stops(
    database_url: str, restored_logging: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = io.StringIO()
    monkeypatch.setattr(sys, "stderr", written)
    monkeypatch.setattr(logs, "ACCESS_FLUSH_SECONDS", 3600.0)  # only the stop writes them
    logs.configure(log_format="json")

    @asynccontextmanager
    async def answering_to_the_end(
        core: Coordinator, authenticator: Authenticator
    ) -> AsyncIterator[RecordingDoor]:
        try:
            yield RecordingDoor("http", [])
        finally:
            # A request the door answered while it stopped.
            logs.access_line("GET %s", ("/last",), {"path": "/last"})

    settings = Settings(database_url=None, check_scheduler_enabled=False)
    async with running_node(database_url, settings, [answering_to_the_end]):
        logs.access_line("GET %s", ("/first",), {"path": "/first"})
        await asyncio.sleep(0.1)
        assert written.getvalue() == "", "waiting for its batch"
    paths = [json.loads(line)["path"] for line in written.getvalue().splitlines()]
    assert paths == ["/first", "/last"]
