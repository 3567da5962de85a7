"""A coordinator with short check-back timings, for the SDK's end-to-end tests."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from coordinator.config import Settings
from tests.conftest import LiveServer


@pytest.fixture
def fast_settings() -> Settings:
    return Settings(
        transaction_timeout_seconds=0.5,
        check_interval_seconds=0.5,
        check_scan_interval_seconds=0.1,
        producer_ttl_seconds=2.0,
    )


@pytest.fixture
def server(database_url: str, fast_settings: Settings) -> Iterator[LiveServer]:
    with LiveServer(database_url, fast_settings) as live:
        yield live


def eventually(condition: Callable[[], object], timeout: float = 20.0) -> object:
    """Poll until condition() is truthy; fail after timeout (behaviour, not speed)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.05)
