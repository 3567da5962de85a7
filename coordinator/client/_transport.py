"""Performing protocol calls over httpx, sync and asyncio, with retries.

What to send and how to read the answer come from `_protocol`, when to try
again from `_retry`; a transport only sends, sleeps and closes.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Generic, TypeVar

import httpx

from coordinator.client._protocol import Call, read_response
from coordinator.client._retry import RETRYABLE, Attempts, RetryPolicy
from coordinator.client.errors import NotFound

H = TypeVar("H", httpx.Client, httpx.AsyncClient)

# Why a call waiting to be sent again gives up at once.
STOPPED = "the client is shutting down"


class _Transport(Generic[H]):
    _http_class: type[H]
    client: H

    def __init__(
        self,
        endpoint: str,
        *,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        token: str | None = None,
    ) -> None:
        # The token goes with every request: the coordinator needs one as soon
        # as any token exists (see docs/security.md).
        headers = {"authorization": f"Bearer {token}"} if token else None
        self.client = self._http_class(base_url=endpoint, timeout=timeout, headers=headers)
        self.timeout = timeout
        self.retry = retry or RetryPolicy()

    def _attempts(self, call: Call) -> Attempts:
        return Attempts(call, self.retry, self.timeout)


class SyncTransport(_Transport[httpx.Client]):
    _http_class = httpx.Client

    def __init__(self, endpoint: str, **options: Any) -> None:
        super().__init__(endpoint, **options)
        self._stopped = threading.Event()

    def call(self, call: Call) -> dict[str, Any]:
        attempts = self._attempts(call)
        while True:
            try:
                return read_response(self.client.request(**attempts.request_args()))
            except RETRYABLE as error:
                if self._stopped.wait(attempts.delay_after(error)):
                    raise attempts.give_up(error, STOPPED) from error
            except NotFound as error:
                if not attempts.done_before(error):
                    raise
                return {}

    def stop_retrying(self) -> None:
        """Calls waiting to be sent again give up now, and later calls are sent once.

        A retry budget outlasts a database failover, which shutdown must not
        wait out: what the calls were doing is made good without them (a
        check-back ends the transaction, an unacked message comes back).
        """
        self._stopped.set()

    def close(self) -> None:
        self.client.close()


class AsyncTransport(_Transport[httpx.AsyncClient]):
    _http_class = httpx.AsyncClient

    def __init__(self, endpoint: str, **options: Any) -> None:
        super().__init__(endpoint, **options)
        self._stopped = asyncio.Event()

    async def call(self, call: Call) -> dict[str, Any]:
        attempts = self._attempts(call)
        while True:
            try:
                return read_response(await self.client.request(**attempts.request_args()))
            except RETRYABLE as error:
                if await self._wait(attempts.delay_after(error)):
                    raise attempts.give_up(error, STOPPED) from error
            except NotFound as error:
                if not attempts.done_before(error):
                    raise
                return {}

    async def _wait(self, seconds: float) -> bool:
        """Sleep `seconds`; True if retrying stopped meanwhile."""
        # Not asyncio.wait_for: on Python 3.11 it swallows a cancellation that
        # comes as the event is set, which is just when shutdown cancels.
        stopped = asyncio.ensure_future(self._stopped.wait())
        try:
            done, _ = await asyncio.wait({stopped}, timeout=seconds)
        finally:
            stopped.cancel()
        return bool(done)

    def stop_retrying(self) -> None:
        """SyncTransport.stop_retrying."""
        self._stopped.set()

    async def close(self) -> None:
        await self.client.aclose()
