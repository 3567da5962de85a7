"""The coordinator's database connections: closed rather than cancelled, and
watching for commits the synchronous standby never confirmed.

Two facts of PostgreSQL shape this (both tried here, see docs/high-availability.md):

- A commit waits for the synchronous standby after it is written locally. If
  that wait is cancelled (a query cancel: psycopg sends one when the task
  running a query is cancelled; an operator's pg_cancel_backend), the commit
  stays, locally only, and the server says no more than
  `WARNING: canceling wait for synchronous replication`. A failover then
  loses it. Such a commit must be answered as a failure, never a success.
- Closing the connection instead leaves the commit waiting, invisible to
  everyone, until the standby has it: nothing is acknowledged that a
  failover can lose.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg.errors import Diagnostic
from psycopg.rows import DictRow

from coordinator.db.deadlines import sever
from coordinator.domain.errors import DatabaseUnavailable

# SQLSTATEs of the warnings a cancelled or interrupted synchronous wait gives:
# 01000 with a query cancel, 57P01 when the backend is being terminated. The
# text is translated with the server's lc_messages, the codes are not, and
# the coordinator's own SQL raises no warnings: any such warning makes the
# statement's commit unconfirmed.
UNCONFIRMED_COMMIT_WARNINGS = frozenset({"01000", "57P01"})

# TCP keepalives and user timeout for every connection whose URL does not set
# its own (libpq's parameters of the same names; they do nothing on a UNIX
# socket). A server that vanished without closing its connections (a machine
# lost, a partition) is noticed within about 25 s on an idle connection, and
# within tcp_user_timeout on one that is sending.
TCP_DEFAULTS = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
}


# For connections that write or LISTEN: whatever the URL leads to (a proxy
# that still routes to a demoted member, a DNS name not yet switched, a
# multi-host URL without the parameter), libpq keeps only a server that takes
# writes, and tries the next host or fails the connection otherwise.
WRITES_DEFAULTS = {"target_session_attrs": "read-write"}


def connection_defaults(url: str, *, writes: bool = True) -> dict[str, str]:
    """The parameters of TCP_DEFAULTS (and, for writes, WRITES_DEFAULTS) `url` does not set."""
    given = conninfo_to_dict(url)
    defaults = {**TCP_DEFAULTS, **(WRITES_DEFAULTS if writes else {})}
    return {name: value for name, value in defaults.items() if name not in given}


class CoordinatorConnection(AsyncConnection[DictRow]):
    """An AsyncConnection that records an unconfirmed commit and is closed, not cancelled."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The warning that made the last commit on this connection unconfirmed.
        self.unconfirmed_commit: str | None = None
        self.add_notice_handler(self._notice)

    def _notice(self, diagnostic: Diagnostic) -> None:
        if (
            diagnostic.severity_nonlocalized == "WARNING"
            and diagnostic.sqlstate in UNCONFIRMED_COMMIT_WARNINGS
        ):
            self.unconfirmed_commit = diagnostic.message_primary or diagnostic.sqlstate

    def forget_unconfirmed_commit(self) -> None:
        self.unconfirmed_commit = None

    def raise_if_unconfirmed(self) -> None:
        """DatabaseUnavailable if a commit here was confirmed locally only."""
        warning, self.unconfirmed_commit = self.unconfirmed_commit, None
        if warning is not None:
            raise DatabaseUnavailable(
                "PostgreSQL stored the change but its synchronous standby did not confirm "
                f"it ({warning}), so it is not acknowledged: a failover could lose it. "
                "Retry the request: an end, or a message sent with its message_id, is "
                "answered as a repeat once the standby has it."
            )

    async def _try_cancel(self, *, timeout: float = 5.0) -> None:
        # psycopg calls this when the task running a query is cancelled (a
        # client went away, a deadline). Close instead of cancelling (see the
        # module's docstring); psycopg then stops waiting for the query
        # (QueryCanceled is what it expects a cancel to end in).
        sever(self)
        self.pgconn.finish()
        raise psycopg.errors.QueryCanceled("closed instead of cancelled")
