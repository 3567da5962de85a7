"""What producers and consumers share: the coordinator's address and, while
started, a transport to it; `with` for start and shutdown; and how a failed
call or listener is logged and survived."""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from coordinator.client._retry import RetryPolicy
from coordinator.client._transport import AsyncTransport, SyncTransport
from coordinator.client.errors import CoordinatorClientError

DEFAULT_ENDPOINT = "http://127.0.0.1:8080"

T = TypeVar("T", SyncTransport, AsyncTransport)


class Connected(Generic[T]):
    """A client of the coordinator at `endpoint`, with a transport while started."""

    role: str  # names the client in the error for a call before start()
    _transport_class: type[T]

    def __init__(
        self, endpoint: str, *, timeout: float, retry: RetryPolicy | None, token: str | None
    ) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.retry = retry
        self._token = token
        self._transport: T | None = None

    def _connect(self) -> T:
        self._transport = self._transport_class(
            self.endpoint, timeout=self.timeout, retry=self.retry, token=self._token
        )
        return self._transport

    def _disconnect(self) -> T:
        """Forget the transport of a start() that failed, for the caller to close.

        The client is then unstarted again, so the next start() tries anew
        instead of returning a client that never finished starting.
        """
        transport, self._transport = self._transport, None
        assert transport is not None
        return transport

    def _stop_retrying(self) -> None:
        """At shutdown: calls waiting to be sent again give up (see SyncTransport.stop_retrying)."""
        if self._transport is not None:
            self._transport.stop_retrying()

    def _own_transport(self) -> T:
        """A transport for one call made before start() (the caller closes it)."""
        return self._transport_class(
            self.endpoint, timeout=self.timeout, retry=self.retry, token=self._token
        )

    @property
    def _client(self) -> T:
        if self._transport is None:
            raise CoordinatorClientError(f"the {self.role} is not started: call start() first")
        return self._transport


class SyncLifecycle(ABC):
    """`with client:` starts it and shuts it down."""

    @abstractmethod
    def start(self) -> Self: ...

    @abstractmethod
    def shutdown(self) -> None: ...

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class AsyncLifecycle(ABC):
    """`async with client:` starts it and shuts it down."""

    @abstractmethod
    async def start(self) -> Self: ...

    @abstractmethod
    async def shutdown(self) -> None: ...

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()


class Survived:
    """A block whose failure is logged and not raised; `failed` tells afterwards."""

    failed = False

    def __init__(self, errors: type[Exception], report: Callable[[Exception], None]) -> None:
        self._errors = errors
        self._report = report

    def __enter__(self) -> Survived:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        if not isinstance(error, self._errors):
            return False
        self.failed = True
        self._report(error)
        return True


def survive_call_errors(log_method: Callable[..., None], message: str, *args: object) -> Survived:
    """For coordinator calls whose failure is made good without the caller (a
    check-back ends the transaction, an unsettled message comes back, the next
    poll tries again): a CoordinatorClientError is logged as `message: error`."""
    return Survived(
        CoordinatorClientError, lambda error: log_method(message + ": %s", *args, error)
    )


def survive_errors(log: logging.Logger, message: str, *args: object) -> Survived:
    """For the user's code (listeners, local transactions): whatever it raises
    is logged with its traceback, and the caller's default answer stands."""
    return Survived(Exception, lambda error: log.error(message, *args, exc_info=error))


def spawn(running: set[asyncio.Task[None]], work: Coroutine[Any, Any, None]) -> None:
    """Run `work` as a task kept in `running` until it is done, so shutdown can wait for it."""
    task = asyncio.create_task(work)
    running.add(task)
    task.add_done_callback(running.discard)
