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
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.soak.child_main import child_main
from bench.soak.exactly_once.stores import Order, insert_consumer_order
from bench.soak.journal import JournalWriter
from bench.soak.receiving import FailoverReceiver, run_workers
from coordinator.client import CoordinatorClientError, Inbox, ReceivedMessage, SimpleConsumer

log = logging.getLogger(__name__)


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


class Worker(FailoverReceiver):
    def __init__(
        self,
        config: InboxConsumerConfig,
        index: int,
        inbox: Inbox,
        journal: JournalWriter,
        stop: threading.Event,
    ) -> None:
        super().__init__(config, index, stop)
        self.config = config
        self.inbox = inbox
        self.journal = journal

    def handle(self, consumer: SimpleConsumer, message: ReceivedMessage) -> None:
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
    journal = JournalWriter(Path(config.journal))
    inbox = Inbox(config.database_url, consumer_group=config.consumer_group)
    run_workers(
        config.threads, lambda index, stop: Worker(config, index, inbox, journal, stop), journal
    )


def main(argv: list[str] | None = None) -> None:
    child_main(InboxConsumerConfig, run, argv)


if __name__ == "__main__":
    main()
