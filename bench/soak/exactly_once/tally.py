"""What the exactly-once run's journals add up to, read as they grow."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from bench.soak.journal import JournalReader

# What a consumer journals after a delivery (see exactly_once/consumer.py).
OUTCOMES = (
    "handled",  # the handler ran, its order and the inbox row committed, acked
    "skipped",  # the inbox already held the message: handler not run, acked
    "failed",  # the handler failed on purpose: both rolled back, not acked
    "handled_unacked",  # committed, left unacked on purpose: it comes back
    "skipped_unacked",  # a duplicate left unacked on purpose
    "error",  # the database or the coordinator failed on the way
)


class InboxTally:
    def __init__(self, producers_dir: Path, consumers_dirs: dict[str, Path]) -> None:
        self._producers = JournalReader(producers_dir)
        self._consumers = {group: JournalReader(d) for group, d in consumers_dirs.items()}
        self.begun: set[str] = set()  # order ids
        self.transaction_ids: set[str] = set()  # every local transaction that began
        self.behaviors: Counter[str] = Counter()
        self.prepare_failed = 0
        self.checks: Counter[str] = Counter()  # check-backs a producer answered, by answer
        self.answered: set[str] = set()  # message ids a producer answered a check-back for
        self.check_sources: Counter[str] = Counter()  # registrations, by mode
        self.idle: set[str] = set()
        self.deliveries: Counter[str] = Counter()  # group -> deliveries
        self.outcomes: dict[str, Counter[str]] = {group: Counter() for group in consumers_dirs}

    @property
    def transactions(self) -> int:
        return sum(self.behaviors.values())

    def read(self) -> None:
        for name, record in self._producers.new_records():
            event = record["event"]
            if event == "order":
                self.begun.add(record["order_id"])
            elif event == "transaction":
                self.behaviors[record["behavior"]] += 1
                self.transaction_ids.add(record["transaction_id"])
            elif event == "prepare_failed":
                self.prepare_failed += 1
            elif event == "check":
                self.checks[record["answer"]] += 1
                self.answered.add(record["message_id"])
            elif event == "check_source":
                self.check_sources[record["mode"]] += 1
            elif event == "idle":
                self.idle.add(name)
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
