"""Performing protocol calls over httpx, sync and asyncio, with retries."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from coordinator.client._protocol import Call, RetryPolicy, read_response
from coordinator.client.errors import CoordinatorUnavailable

# Errors after which resending an idempotent call is safe and useful.
_RETRYABLE = (httpx.TransportError, CoordinatorUnavailable)


class SyncTransport:
    def __init__(
        self, endpoint: str, *, timeout: float = 10.0, retry: RetryPolicy | None = None
    ) -> None:
        self.client = httpx.Client(base_url=endpoint, timeout=timeout)
        self.retry = retry or RetryPolicy()

    def call(self, call: Call) -> dict[str, Any]:
        delays = self.retry.delays() if call.idempotent else iter(())
        while True:
            try:
                response = self.client.request(
                    call.method,
                    call.path,
                    json=call.json,
                    params=call.params,
                    timeout=call.timeout if call.timeout is not None else httpx.USE_CLIENT_DEFAULT,
                )
                return read_response(response)
            except _RETRYABLE as error:
                delay = next(delays, None)
                if delay is None:
                    raise _unavailable(call, error) from error
                time.sleep(delay)

    def close(self) -> None:
        self.client.close()


class AsyncTransport:
    def __init__(
        self, endpoint: str, *, timeout: float = 10.0, retry: RetryPolicy | None = None
    ) -> None:
        self.client = httpx.AsyncClient(base_url=endpoint, timeout=timeout)
        self.retry = retry or RetryPolicy()

    async def call(self, call: Call) -> dict[str, Any]:
        delays = self.retry.delays() if call.idempotent else iter(())
        while True:
            try:
                response = await self.client.request(
                    call.method,
                    call.path,
                    json=call.json,
                    params=call.params,
                    timeout=call.timeout if call.timeout is not None else httpx.USE_CLIENT_DEFAULT,
                )
                return read_response(response)
            except _RETRYABLE as error:
                delay = next(delays, None)
                if delay is None:
                    raise _unavailable(call, error) from error
                await asyncio.sleep(delay)

    async def close(self) -> None:
        await self.client.aclose()


def _unavailable(call: Call, error: Exception) -> CoordinatorUnavailable:
    if isinstance(error, CoordinatorUnavailable):
        return error
    return CoordinatorUnavailable(f"{call.method} {call.path} failed: {error!r}")
