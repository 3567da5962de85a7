"""The Coordinator: the container of the core's services that every door (HTTP, gRPC,
CLI) holds. It builds each service's config from the settings once and does
no work itself: callers use its services (`core.transactions.prepare(...)`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from coordinator.config import Settings
from coordinator.core.checkback import CheckBack
from coordinator.core.checkback.sources import CheckSources
from coordinator.core.configs import ServiceConfigs
from coordinator.core.context import CoreContext
from coordinator.core.delivery import Delivery
from coordinator.core.inspection import Inspection
from coordinator.core.overview import OverviewReader
from coordinator.core.retention import Retention
from coordinator.core.tokens import Tokens
from coordinator.core.transactions import Transactions
from coordinator.db.notifier import CHANNELS, Notifier
from coordinator.db.pool import CoordinatorPool
from coordinator.db.urls import in_schema, libpq_url
from coordinator.metrics import Meter

# How long a starting node waits for its pool's first connections; a database
# that cannot give pool_min_size connections within it will not serve either,
# so the node ends with a sentence instead of waiting psycopg's 30 s.
POOL_OPEN_SECONDS = 10.0
# The read pool serves the overview only (a status page, `coordinator status`,
# /metrics' scrapes): a few reads at a time.
READ_POOL_MAX_SIZE = 4


class Coordinator:
    def __init__(
        self,
        pool: CoordinatorPool,
        settings: Settings,
        notifier: Notifier | None = None,
        read_pool: CoordinatorPool | None = None,
        meter: Meter | None = None,
    ) -> None:
        self.pool = pool
        # On read_database_url (a standby) when it is set: what the overview reads.
        self.read_pool = read_pool
        self.configs = configs = ServiceConfigs.from_settings(settings)
        # Long polls (check requests, receives) wait on the notifier; without
        # one (CLI commands) they fall back to polling.
        self.notifier = notifier
        # What the core and the doors count with, and /metrics serves.
        self.meter = meter = meter if meter is not None else Meter()
        self.context = context = CoreContext(pool, notifier, meter=meter)
        self.transactions = Transactions(context, configs.transactions)  # prepare, send, end
        self.inspection = Inspection(context)  # a message with its history, status, health
        self.delivery = Delivery(context, configs.delivery)  # subscriptions, receive, ack, ...
        self.tokens = Tokens(context)  # API tokens: create, list, revoke
        # producers, check-back rounds, operator actions
        self.checkback = CheckBack(context, configs.checkback, self.transactions.end)
        # producer groups' databases that answer their check-backs
        self.check_sources = CheckSources(context, configs.checkback)
        # keeps the tables to size (run by the node's retention job)
        self.retention = Retention(context, configs.retention, self.delivery.take_received_groups)
        # the figures of the status page, `coordinator status` and /metrics' gauges
        self.overview = OverviewReader(
            context, configs.overview, lambda: self.retention.last_result, reads=read_pool
        )

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        database_url: str,
        settings: Settings | None = None,
        *,
        listen: bool = False,
        meter: Meter | None = None,
    ) -> AsyncIterator[Coordinator]:
        """A coordinator on an already migrated database, closed on exit.

        listen=True also opens the LISTEN connection that wakes long polls.
        With settings.read_database_url, a second pool on that server serves
        the overview's reads; everything else (writes, LISTEN, advisory locks)
        stays on `database_url`.
        """
        settings = settings or Settings()
        # Whatever URL it is given: every connection finds the coordinator's schema.
        database_url = in_schema(database_url, settings.database_schema)
        pool = CoordinatorPool(
            database_url,
            min_size=settings.pool_min_size,
            max_size=settings.pool_max_size,
            timeout=settings.pool_timeout_seconds,
            deadline=settings.database_deadline_seconds,
            synchronous_commit=settings.synchronous_commit,
        )
        await pool.open(wait=True, timeout=POOL_OPEN_SECONDS)
        notifier = (
            Notifier(database_url, CHANNELS, on_connection_lost=pool.suspect) if listen else None
        )
        read_pool = _read_pool(settings)
        try:
            if read_pool is not None:
                # Not waited for: a standby that is away fails the overview's
                # reads (database_unavailable) until it is back, and nothing else.
                await read_pool.open(wait=False)
            if notifier is not None:
                await notifier.start()
            yield cls(pool, settings, notifier, read_pool, meter)
        finally:
            if notifier is not None:
                await notifier.stop()
            if read_pool is not None:
                await read_pool.close()
            await pool.close()

    def begin_shutdown(self) -> None:
        """The server stops: every long poll answers now, with what it has.

        Idempotent, and not a close: requests in flight finish, and new ones
        are served (a long poll among them answers without waiting).
        """
        self.context.stopping.set()
        if self.notifier is not None:
            self.notifier.wake_all()

    @property
    def stopping(self) -> bool:
        return self.context.stopping.is_set()


def _read_pool(settings: Settings) -> CoordinatorPool | None:
    """A pool on read_database_url, bounded like the main one; None when it is unset."""
    if not settings.read_database_url:
        return None
    return CoordinatorPool(
        in_schema(libpq_url(settings.read_database_url), settings.database_schema),
        min_size=1,
        max_size=min(settings.pool_max_size, READ_POOL_MAX_SIZE),
        timeout=settings.pool_timeout_seconds,
        deadline=settings.database_deadline_seconds,
        # It only reads, a standby by choice: no commit waits for one.
        synchronous_commit=None,
        writes=False,
        name="coordinator-read",
    )
