"""Whether to send a call again: the retry budget and each call's attempts, without I/O.

A transport asks `Attempts` for each attempt's arguments, and after a failure
how long to wait before the next one, or gets the error to raise instead.
"""

from __future__ import annotations

import random
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from coordinator.client._protocol import Call, request_args
from coordinator.client.errors import CoordinatorUnavailable, NotFound

# Long enough to ride out a PostgreSQL failover: with Patroni's defaults (ttl
# 30, loop_wait 10) the new primary takes writes 25-30 s after the old one
# died, and a request sent just before it does can wait the coordinator's
# database_deadline_seconds (5 s) for its 503. About twice the failover,
# for one slower than the defaults and a pool that takes a moment to reconnect.
DEFAULT_RETRY_SECONDS = 60.0
# The shortest timeout a resend gets when little of the budget is left:
# shorter, it would fail on a coordinator that answers in its usual time.
ATTEMPT_TIMEOUT_FLOOR = 1.0


@dataclass(frozen=True)
class RetryPolicy:
    """How long a call is sent again after a connection error or a 5xx.

    Idempotent calls are resent until `retry_seconds` have passed since the
    call began, with capped exponential backoff and jitter between attempts
    (`initial_delay` doubling up to `max_delay`), and never sooner than an
    answer's Retry-After. A resend's timeout is cut to what is left of
    `retry_seconds` (but not below ATTEMPT_TIMEOUT_FLOOR), so a call ends
    about `retry_seconds` after it began, or after its first attempt's timeout
    if that is longer. `retry_seconds=0` sends each call once.

    `attempts` is deprecated: it still caps the number of attempts, and warns.
    It comes first so that the positional form `RetryPolicy(5)` keeps its
    meaning until it is removed.
    """

    attempts: int | None = None
    initial_delay: float = 0.1
    max_delay: float = 2.0
    retry_seconds: float = DEFAULT_RETRY_SECONDS

    def __post_init__(self) -> None:
        if self.retry_seconds < 0:
            raise ValueError(f"retry_seconds must be 0 or more, got {self.retry_seconds:g}")
        if self.attempts is not None:
            warnings.warn(
                "RetryPolicy(attempts=...) is deprecated and will be removed in the next "
                "release: calls are retried for a time, give retry_seconds instead",
                DeprecationWarning,
                # past __post_init__ and the dataclass's __init__, to the caller
                stacklevel=3,
            )

    def delays(self) -> Iterator[float]:
        """The backoff before each resend: endless, or `attempts - 1` of them."""
        delay = self.initial_delay
        resends = 0
        while self.attempts is None or resends < self.attempts - 1:
            yield delay * random.uniform(0.5, 1.0)
            delay = min(delay * 2, self.max_delay)
            resends += 1


# Errors after which resending an idempotent call is safe and useful.
RETRYABLE = (httpx.TransportError, CoordinatorUnavailable)


class Attempts:
    """The retry decisions for one call: each attempt's timeout, and how long
    to wait before sending it again or that it is time to give up."""

    def __init__(self, call: Call, policy: RetryPolicy, timeout: float) -> None:
        self.call = call
        self.sent = 0
        self._timeout = call.timeout if call.timeout is not None else timeout
        self._started = time.monotonic()
        self._deadline = self._started + policy.retry_seconds
        self._retry_seconds = policy.retry_seconds
        self._delays = policy.delays()

    def request_args(self) -> dict[str, Any]:
        """httpx's `request` arguments for the next attempt, counting it as sent."""
        self.sent += 1
        args = request_args(self.call)
        if self.sent > 1:
            left = self._deadline - time.monotonic()
            args["timeout"] = min(self._timeout, max(left, ATTEMPT_TIMEOUT_FLOOR))
        return args

    def delay_after(self, error: Exception) -> float:
        """The wait before the next attempt; raises the error to give when none is left."""
        if not self.call.idempotent:
            raise unavailable(self.call, error) from error
        delay = next(self._delays, None)
        if delay is None:
            raise self.give_up(error, "no attempts left") from error
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:
            delay = max(delay, retry_after)
        if time.monotonic() + delay >= self._deadline:
            raise self.give_up(error, f"retry_seconds={self._retry_seconds:g} spent") from error
        return delay

    def done_before(self, error: Exception) -> bool:
        """Whether `error`, the answer to a resend, says an earlier attempt did the work."""
        return self.call.done_if_gone_on_resend and self.sent > 1 and isinstance(error, NotFound)

    def give_up(self, error: Exception, why: str) -> CoordinatorUnavailable:
        if self.sent <= 1:
            return unavailable(self.call, error)
        seconds = time.monotonic() - self._started
        return CoordinatorUnavailable(
            f"{self.call.method} {self.call.path} gave up after {self.sent} attempts "
            f"in {seconds:.1f} s ({why}); the last failed with: {_described(error)}",
            retry_after=getattr(error, "retry_after", None),
        )


def _described(error: Exception) -> str:
    return str(error) if isinstance(error, CoordinatorUnavailable) else repr(error)


def unavailable(call: Call, error: Exception) -> CoordinatorUnavailable:
    if isinstance(error, CoordinatorUnavailable):
        return error
    return CoordinatorUnavailable(f"{call.method} {call.path} failed: {error!r}")
