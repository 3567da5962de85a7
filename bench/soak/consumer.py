"""A soak consumer process: `python -m bench.soak.consumer CONFIG_JSON`.

A few threads each receive from the consumer group through one SDK
SimpleConsumer per node, moving to the next node when one fails. Every
delivery is journaled before anything is done with it; some are left
unacked on purpose so the coordinator delivers them again, the rest are
acked and the ack's outcome journaled. SIGTERM stops it.
"""

from __future__ import annotations

import json
import logging
import random
import signal
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.soak.journal import JournalWriter
from bench.soak.verdict import Ack
from coordinator.client import (
    Conflict,
    CoordinatorClientError,
    CoordinatorUnavailable,
    NotFound,
    ReceivedMessage,
    RetryPolicy,
    SimpleConsumer,
)

log = logging.getLogger(__name__)
RETRY = RetryPolicy(attempts=4, initial_delay=0.1, max_delay=0.5)


@dataclass(frozen=True)
class ConsumerConfig:
    name: str
    endpoints: list[str]
    consumer_group: str
    topic: str
    seed: int
    journal: str
    threads: int
    no_ack_probability: float
    invisible_seconds: float

    def to_json(self) -> str:
        return json.dumps(asdict(self))


class Worker:
    def __init__(
        self, config: ConsumerConfig, index: int, journal: JournalWriter, stop: threading.Event
    ) -> None:
        self.config = config
        self.journal = journal
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
                    self._handle(message)
        finally:
            for consumer in self.consumers:
                consumer.shutdown()

    def _handle(self, message: ReceivedMessage) -> None:
        self.journal.write(
            event="delivery", message_id=message.message_id, attempt=message.delivery_attempt
        )
        if self.rng.random() < self.config.no_ack_probability:
            return  # comes back once its invisible duration is over
        self.journal.write(
            event="ack",
            message_id=message.message_id,
            attempt=message.delivery_attempt,
            outcome=self._ack(message),
        )

    def _ack(self, message: ReceivedMessage) -> Ack:
        """Ack on the current node, then the others: a receipt handle is good on any node."""
        order = self.consumers[self.current :] + self.consumers[: self.current]
        for consumer in order:
            try:
                consumer.start()
                consumer.ack(message)
                return Ack.ACKED
            except NotFound:
                # Acked by an earlier attempt whose answer was lost, most
                # likely; not proof, so the verdict does not count on it.
                return Ack.NOT_FOUND
            except Conflict:
                return Ack.STALE  # received again meanwhile
            except CoordinatorUnavailable:
                continue
            except CoordinatorClientError:
                log.exception("ack of %s refused", message.message_id)
                break
        return Ack.FAILED


def run(config: ConsumerConfig) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    journal = JournalWriter(Path(config.journal))
    threads = [
        threading.Thread(target=Worker(config, index, journal, stop).run, name=f"consumer-{index}")
        for index in range(config.threads)
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


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    config = ConsumerConfig(**json.loads(args[0]))
    logging.basicConfig(
        level=logging.WARNING, format=f"%(asctime)s {config.name} %(levelname)s %(message)s"
    )
    run(config)


if __name__ == "__main__":
    main()
