"""Sending a request again, as the clients do, until it is answered or the horizon ends.

A client (the SDK, RocketMQ's) resends on "unavailable" (HTTP 503,
HA_NOT_AVAILABLE, no answer at all) with the same message id or the same
end, after a short capped backoff with jitter. Every attempt is recorded;
the wait between attempts ends at once when the load is stopped.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from bench.failover.ledger import Answer, Door, Kind, Ledger

FIRST_BACKOFF = 0.05
LONGEST_BACKOFF = 0.5

T = TypeVar("T")


@dataclass(frozen=True)
class Retrier:
    ledger: Ledger
    rng: random.Random
    aborted: threading.Event  # no further attempt once set
    horizon: float  # seconds a request is sent again for, from its first attempt

    def until_answered(
        self, door: Door, kind: Kind, attempt: Callable[[], tuple[Answer, T]]
    ) -> tuple[Answer, T] | None:
        """The first answer that is not "unavailable", or None when the horizon ended
        (or the load stopped) first."""
        give_up_at = time.monotonic() + self.horizon
        delay = FIRST_BACKOFF
        while True:
            answer, value = attempt()
            self.ledger.answer(answer)
            if not answer.retryable:
                return answer, value
            pause = delay * self.rng.uniform(0.5, 1.0)
            if time.monotonic() + pause > give_up_at or self.aborted.wait(pause):
                self.ledger.gave_up(door, kind)
                return None
            delay = min(delay * 2, LONGEST_BACKOFF)
