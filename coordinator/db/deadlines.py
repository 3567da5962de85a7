"""Bounding the time a connection is held: shut its socket down when time is up.

A statement on a connection to a server that stopped answering (a frozen
primary, a partition, a commit waiting for a standby that is gone) waits for
as long as the server is away: neither psycopg nor libpq bounds it, and
`statement_timeout` does not end a commit's wait for the synchronous standby.
A query cancel would, but a cancelled synchronous wait commits locally, and
the next failover loses what the client was told was stored.

So when a connection's time is up its socket is shut down, on our side: the
statement waiting on it fails at once (libpq reads end of file) and the pool
drops the connection. The server, if it ever wakes, finds the client gone;
a commit still waiting for its standby stays invisible until the standby has
it, and is never reported as done.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Iterator
from typing import Any

from psycopg import AsyncConnection


class Severance:
    """Whether a connection's time ran out (and its socket was shut down)."""

    def __init__(self) -> None:
        self.severed = False


def sever(conn: AsyncConnection[Any]) -> bool:
    """Shut the connection's socket down in both directions; False if it had none."""
    try:
        descriptor = conn.pgconn.socket
    except Exception:  # closed already: nothing to sever
        return False
    # A duplicate, so that closing our socket object leaves psycopg's descriptor
    # alone; shutdown acts on the connection both share.
    with socket.socket(fileno=os.dup(descriptor)) as shared, contextlib.suppress(OSError):
        shared.shutdown(socket.SHUT_RDWR)
    return True


@contextlib.contextmanager
def severed_after(conn: AsyncConnection[Any], seconds: float) -> Iterator[Severance]:
    """Run the block with `conn`; sever the connection if it is still in use after `seconds`."""
    severance = Severance()

    def expire() -> None:
        severance.severed = sever(conn)

    timer = asyncio.get_running_loop().call_later(max(seconds, 0.0), expire)
    try:
        yield severance
    finally:
        timer.cancel()
