"""What the exactly-once run's journals add up to, read as they grow."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from bench.soak.journal import JournalReader
from bench.soak.tally import ProducerTally

# What a consumer journals after a delivery (see exactly_once/consumer.py).
OUTCOMES = (
    "handled",  # the handler ran, its order and the inbox row committed, acked
    "skipped",  # the inbox already held the message: handler not run, acked
    "failed",  # the handler failed on purpose: both rolled back, not acked
    "handled_unacked",  # committed, left unacked on purpose: it comes back
    "skipped_unacked",  # a duplicate left unacked on purpose
    "error",  # the database or the coordinator failed on the way
)


class InboxTally(ProducerTally):
    def __init__(self, producers_dir: Path, consumers_dirs: dict[str, Path]) -> None:
        super().__init__(producers_dir)
        self._consumers = {group: JournalReader(d) for group, d in consumers_dirs.items()}
        self.begun: set[str] = set()  # order ids
        self.transaction_ids: set[str] = set()  # every local transaction that began
        self.answered: set[str] = set()  # message ids a producer answered a check-back for
        self.check_sources: Counter[str] = Counter()  # registrations, by mode
        self.deliveries: Counter[str] = Counter()  # group -> deliveries
        self.outcomes: dict[str, Counter[str]] = {group: Counter() for group in consumers_dirs}

    def _producer_event(self, event: str, record: dict[str, Any]) -> None:
        if event == "order":
            self.begun.add(record["order_id"])
        elif event == "transaction":
            self.transaction_ids.add(record["transaction_id"])
        elif event == "check":
            self.answered.add(record["message_id"])
        elif event == "check_source":
            self.check_sources[record["mode"]] += 1

    def read(self) -> None:
        self.read_producers()
        for group, reader in self._consumers.items():
            for _, record in reader.new_records():
                if record["event"] == "delivery":
                    self.deliveries[group] += 1
                else:
                    self.outcomes[group][record["event"]] += 1

    def skipped(self, group: str) -> int:
        """Redeliveries the inbox recognised: the handler did not run again."""
        outcomes = self.outcomes[group]
        return outcomes["skipped"] + outcomes["skipped_unacked"]
