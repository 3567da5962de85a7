"""What both soaks' consumer processes share: a receive loop with node failover, and its threads.

Each worker receives through one SDK SimpleConsumer per node, moving to
the next node when one fails; what it does with a message is the subclass's
`handle`. `run_workers` runs the workers on threads until SIGTERM, and exits
the process if one dies, so the soak counts it and starts a new consumer.
"""

from __future__ import annotations

import random
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from bench.soak.journal import JournalWriter
from coordinator.client import CoordinatorClientError, ReceivedMessage, RetryPolicy, SimpleConsumer

# Short: a receiver whose node fails moves on to the next one.
RETRY = RetryPolicy(retry_seconds=1.0, initial_delay=0.1, max_delay=0.5)


class ReceiverConfig(Protocol):
    name: str
    endpoints: list[str]
    consumer_group: str
    topic: str
    seed: int
    invisible_seconds: float


class FailoverReceiver:
    def __init__(self, config: ReceiverConfig, index: int, stop: threading.Event) -> None:
        self.stop = stop
        self.rng = random.Random(f"{config.seed}:{config.name}:{index}")
        self.consumers = [
            SimpleConsumer(
                config.consumer_group,
                {config.topic: "*"},
                endpoint,
                invisible_seconds=config.invisible_seconds,
                wait_seconds=1.0,
                timeout=5.0,
                retry=RETRY,
            )
            for endpoint in config.endpoints
        ]
        self.current = index % len(self.consumers)

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                consumer = self.consumers[self.current]
                try:
                    consumer.start()
                    messages = consumer.receive(max_messages=16)
                except CoordinatorClientError:
                    self.current = (self.current + 1) % len(self.consumers)
                    self.stop.wait(0.2)
                    continue
                for message in messages:
                    self.handle(consumer, message)
        finally:
            for consumer in self.consumers:
                consumer.shutdown()

    def handle(self, consumer: SimpleConsumer, message: ReceivedMessage) -> None:
        raise NotImplementedError


def run_workers(
    count: int,
    worker: Callable[[int, threading.Event], FailoverReceiver],
    journal: JournalWriter,
) -> None:
    """Run `count` workers (`worker(index, stop)`) until SIGTERM; closes the journal."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threads: Sequence[threading.Thread] = [
        threading.Thread(target=worker(index, stop).run, name=f"consumer-{index}")
        for index in range(count)
    ]
    for thread in threads:
        thread.start()
    try:
        while not stop.wait(0.5):
            if not all(thread.is_alive() for thread in threads):
                # A worker died of something unforeseen: exit, so the soak
                # counts it and starts a new consumer.
                raise SystemExit(1)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        journal.close()
