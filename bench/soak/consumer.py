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
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.soak.child_main import child_main
from bench.soak.journal import JournalWriter
from bench.soak.receiving import FailoverReceiver, run_workers
from bench.soak.verdict import Ack
from coordinator.client import (
    Conflict,
    CoordinatorClientError,
    CoordinatorUnavailable,
    NotFound,
    ReceivedMessage,
    SimpleConsumer,
)

log = logging.getLogger(__name__)


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


class Worker(FailoverReceiver):
    def __init__(
        self, config: ConsumerConfig, index: int, journal: JournalWriter, stop: threading.Event
    ) -> None:
        super().__init__(config, index, stop)
        self.config = config
        self.journal = journal

    def handle(self, consumer: SimpleConsumer, message: ReceivedMessage) -> None:
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
    journal = JournalWriter(Path(config.journal))
    run_workers(config.threads, lambda index, stop: Worker(config, index, journal, stop), journal)


def main(argv: list[str] | None = None) -> None:
    child_main(ConsumerConfig, run, argv)


if __name__ == "__main__":
    main()
