"""An exactly-once soak consumer: `python -m bench.soak.exactly_once.consumer CONFIG_JSON`.

A few threads each receive from the consumer group through one SDK
SimpleConsumer per node (moving to the next node when one fails) and hand
each message to the inbox, whose handler writes the order into the group's
own database in the inbox's transaction. On purpose, some handlers fail
after their write (the inbox rolls both back; the message comes back) and
some messages are processed and committed but never acked (they come back
and the inbox skips them). Every outcome is journaled; SIGTERM stops it.
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
from typing import Any

import psycopg

from bench.soak.exactly_once.stores import Order, insert_consumer_order
from bench.soak.journal import JournalWriter
from coordinator.client import (
    CoordinatorClientError,
    Inbox,
    ReceivedMessage,
    RetryPolicy,
    SimpleConsumer,
)

log = logging.getLogger(__name__)
RETRY = RetryPolicy(attempts=4, initial_delay=0.1, max_delay=0.5)


@dataclass(frozen=True)
class InboxConsumerConfig:
    name: str
    endpoints: list[str]
    consumer_group: str
    topic: str
    run: str
    database_url: str  # the group's own database: its inbox and its orders
    seed: int
    journal: str
    threads: int
    no_ack_probability: float
    fail_probability: float
    invisible_seconds: float

    def to_json(self) -> str:
        return json.dumps(asdict(self))


class HandlerFailed(Exception):
    """Raised on purpose after the order's insert: the inbox must roll both back."""


class Worker:
    def __init__(
        self,
        config: InboxConsumerConfig,
        index: int,
        inbox: Inbox,
        journal: JournalWriter,
        stop: threading.Event,
    ) -> None:
        self.config = config
        self.inbox = inbox
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
                    self._handle(consumer, message)
        finally:
            for consumer in self.consumers:
                consumer.shutdown()

    def _handle(self, consumer: SimpleConsumer, message: ReceivedMessage) -> None:
        draw = self.rng.random()
        fail = draw < self.config.fail_probability
        keep = not fail and draw < self.config.fail_probability + self.config.no_ack_probability
        mid, attempt = message.message_id, message.delivery_attempt
        self.journal.write(event="delivery", message_id=mid, attempt=attempt)
        handler = self._failing_handler if fail else self._handler
        try:
            if keep:
                outcome = self._commit_without_ack(message)
            else:
                ran = self.inbox.consume(consumer, message, handler)
                outcome = "handled" if ran else "skipped"
        except HandlerFailed:
            outcome = "failed"  # rolled back, not acked: delivered again
        except (CoordinatorClientError, psycopg.Error) as error:
            # Committed or not, acked or not: the inbox and the redelivery sort it out.
            log.warning("message %s: %s", mid, error)
            outcome = "error"
        self.journal.write(event=outcome, message_id=mid, attempt=attempt)

    def _commit_without_ack(self, message: ReceivedMessage) -> str:
        """The inbox's primitive in a transaction of our own, then no ack: it comes back."""
        with psycopg.connect(self.config.database_url, connect_timeout=5) as conn:
            ran = self.inbox.process(conn, message, self._handler)
        return "handled_unacked" if ran else "skipped_unacked"

    def _handler(self, conn: Any, message: ReceivedMessage) -> None:
        order = Order.from_body(message.body)
        insert_consumer_order(conn, order, message.message_id, self.config.name, self.config.run)

    def _failing_handler(self, conn: Any, message: ReceivedMessage) -> None:
        self._handler(conn, message)
        raise HandlerFailed(message.message_id)


def run(config: InboxConsumerConfig) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    journal = JournalWriter(Path(config.journal))
    inbox = Inbox(config.database_url, consumer_group=config.consumer_group)
    threads = [
        threading.Thread(
            target=Worker(config, index, inbox, journal, stop).run, name=f"consumer-{index}"
        )
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
    config = InboxConsumerConfig(**json.loads(args[0]))
    logging.basicConfig(
        level=logging.WARNING, format=f"%(asctime)s {config.name} %(levelname)s %(message)s"
    )
    run(config)


if __name__ == "__main__":
    main()
