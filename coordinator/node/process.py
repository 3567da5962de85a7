"""A node serving in this process until a signal stops it."""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from coordinator.config import Settings
from coordinator.node.doors import configured_doors
from coordinator.node.running import Node, running_node


def serve_node(
    database_url: str,
    settings: Settings,
    http_sockets: list[socket.socket],
    *,
    on_started: Callable[[], object] | None = None,
) -> None:
    """Serve until SIGTERM or SIGINT; a second SIGINT stops waiting for requests in flight.

    on_started is called once every door serves.
    """
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(_serve(database_url, settings, http_sockets, on_started))


async def _serve(
    database_url: str,
    settings: Settings,
    http_sockets: list[socket.socket],
    on_started: Callable[[], object] | None,
) -> None:
    doors = configured_doors(settings, http_sockets)
    async with running_node(database_url, settings, doors) as node:
        with _stopped_by_signals(node):
            if on_started is not None:
                on_started()
            await node.serve()


@contextmanager
def _stopped_by_signals(node: Node) -> Iterator[None]:
    loop = asyncio.get_running_loop()

    def on_interrupt() -> None:
        # Ctrl-C reaches every process of the terminal's group: a `--workers`
        # process gets it and then its parent's SIGTERM, which must not count
        # as a second Ctrl-C.
        (node.hurry if node.stopping else node.stop)()

    handlers: dict[signal.Signals, Callable[[], None]] = {
        signal.SIGTERM: node.stop,
        signal.SIGINT: on_interrupt,
    }
    before = {sig: signal.getsignal(sig) for sig in handlers}
    for sig, handler in handlers.items():
        loop.add_signal_handler(sig, handler)
    try:
        yield
    finally:
        for sig, previous in before.items():
            loop.remove_signal_handler(sig)
            # What the process did on a signal before (the CLI: exit cleanly).
            signal.signal(sig, previous)


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    # uvicorn's choice too (`loop="auto"`): uvloop where it is installed.
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
