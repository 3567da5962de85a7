"""What the core's services share, and nothing more: the pool, the notifier, the stop signal,
the meter.

Services take a `CoreContext` and a small frozen config of their own (built
from the settings in `configs.py`), never the `Settings` nor the
`Coordinator` that composes them, so each can be built and tested alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from coordinator.db.notifier import Notifier
from coordinator.db.pool import CoordinatorPool
from coordinator.domain.messages import EndRequest, EndResult
from coordinator.metrics import Meter

# How a service ends a transaction (the check-back applies pushed answers with it).
EndTransaction = Callable[[EndRequest], Awaitable[EndResult]]


@dataclass(frozen=True, slots=True)
class CoreContext:
    pool: CoordinatorPool
    # Long polls (check requests, receives) wait on the notifier; without one
    # (CLI commands) they fall back to polling.
    notifier: Notifier | None = None
    # Set once the server shuts down: long polls answer at once with what
    # they have (nothing), and a check-back round ends after its batch.
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    # Counts each fact where a service decides it; a core of its own (a test's,
    # a CLI command's) counts on a registry of its own.
    meter: Meter = field(default_factory=Meter)
