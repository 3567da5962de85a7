"""Performing protocol calls over httpx, sync and asyncio, with retries.

What to send, how to read the answer and when to try again come from
`_protocol`; a transport only sends, sleeps and closes.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Generic, TypeVar

import httpx

from coordinator.client._protocol import (
    RETRYABLE,
    Attempts,
    Call,
    RetryPolicy,
    read_response,
    request_args,
)

H = TypeVar("H", httpx.Client, httpx.AsyncClient)


class _Transport(Generic[H]):
    _http_class: type[H]

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
        self.retry = retry or RetryPolicy()


class SyncTransport(_Transport[httpx.Client]):
    _http_class = httpx.Client

    def call(self, call: Call) -> dict[str, Any]:
        attempts = Attempts(call, self.retry)
        while True:
            try:
                return read_response(self.client.request(**request_args(call)))
            except RETRYABLE as error:
                time.sleep(attempts.delay_after(error))

    def close(self) -> None:
        self.client.close()


class AsyncTransport(_Transport[httpx.AsyncClient]):
    _http_class = httpx.AsyncClient

    async def call(self, call: Call) -> dict[str, Any]:
        attempts = Attempts(call, self.retry)
        while True:
            try:
                return read_response(await self.client.request(**request_args(call)))
            except RETRYABLE as error:
                await asyncio.sleep(attempts.delay_after(error))

    async def close(self) -> None:
        await self.client.aclose()
