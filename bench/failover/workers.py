"""What every thread of the load shares: its settings, its stop signals, its randomness."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

from bench.failover.config import LoadConfig
from bench.failover.ledger import Door, Ledger
from bench.failover.retrying import Retrier

# A consumer's pause after a receive that failed (503, no answer), before the next.
RECEIVE_PAUSE = 0.2


@dataclass(frozen=True)
class Signals:
    until: float  # time.monotonic() past which every loop ends by itself
    stop: threading.Event  # no new transaction (producers), no new receive (consumers)
    aborted: threading.Event  # no further attempt of anything, waits end at once


class Worker:
    door: Door
    role: str

    def __init__(
        self, config: LoadConfig, index: int, ledger: Ledger, signals: Signals, horizon: float
    ) -> None:
        self.config = config
        self.index = index
        self.ledger = ledger
        self.signals = signals
        self.rng = random.Random(f"{config.seed}:{self.door}:{self.role}:{index}")
        self.retrier = Retrier(ledger, self.rng, signals.aborted, horizon)

    @property
    def name(self) -> str:
        return f"failover-{self.door}-{self.role}-{self.index}"

    def running(self) -> bool:
        signals = self.signals
        return not (signals.stop.is_set() or signals.aborted.is_set()) and (
            time.monotonic() < signals.until
        )

    def run(self) -> None:
        raise NotImplementedError

    def guarded_run(self) -> None:
        """run(), with a death recorded: the verifier reports it."""
        try:
            self.run()
        except Exception as error:
            self.ledger.crashed(f"{self.name}: {error!r}")


class Producer(Worker):
    role = "producer"

    def __init__(self, config: LoadConfig, index: int, ledger: Ledger, signals: Signals) -> None:
        super().__init__(config, index, ledger, signals, config.retry_horizon)

    def resolution(self) -> str:
        return "commit" if self.rng.random() < self.config.commit_share else "rollback"


class Consumer(Worker):
    role = "consumer"

    def __init__(self, config: LoadConfig, index: int, ledger: Ledger, signals: Signals) -> None:
        # An ack is worth sending again until its message comes back anyway.
        super().__init__(
            config, index, ledger, signals, min(config.invisible_seconds, config.retry_horizon)
        )

    @property
    def group(self) -> str:
        raise NotImplementedError

    def pause(self) -> None:
        self.signals.aborted.wait(RECEIVE_PAUSE)
