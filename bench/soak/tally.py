"""What the producers' and consumers' journals add up to, read as they grow."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.soak.journal import JournalReader
from bench.soak.verdict import Ack, AckRecord, Delivery, GroupEvidence


@dataclass
class GroupTally:
    deliveries: list[Delivery] = field(default_factory=list)
    acks: list[AckRecord] = field(default_factory=list)

    def evidence(self, dead_letters: frozenset[str]) -> GroupEvidence:
        return GroupEvidence(tuple(self.deliveries), tuple(self.acks), dead_letters)


class ProducerTally:
    """What both soaks count in the producers' journals; `_producer_event` adds a soak's own."""

    def __init__(self, producers_dir: Path) -> None:
        self._producers = JournalReader(producers_dir)
        self.behaviors: Counter[str] = Counter()
        self.prepare_failed = 0
        self.checks: Counter[str] = Counter()  # check-backs a producer answered, by answer
        self.idle: set[str] = set()  # producer processes that stopped sending

    @property
    def transactions(self) -> int:
        return sum(self.behaviors.values())

    def read_producers(self) -> None:
        for name, record in self._producers.new_records():
            event = record["event"]
            if event == "transaction":
                self.behaviors[record["behavior"]] += 1
            elif event == "prepare_failed":
                self.prepare_failed += 1
            elif event == "check":
                self.checks[record["answer"]] += 1
            elif event == "idle":
                self.idle.add(name)
            self._producer_event(event, record)

    def _producer_event(self, event: str, record: dict[str, Any]) -> None:
        pass


class Tally(ProducerTally):
    def __init__(self, producers_dir: Path, consumers_dirs: dict[str, Path]) -> None:
        super().__init__(producers_dir)
        self._consumers = {group: JournalReader(d) for group, d in consumers_dirs.items()}
        self.kills = 0
        self.groups = {group: GroupTally() for group in consumers_dirs}

    def _producer_event(self, event: str, record: dict[str, Any]) -> None:
        if event == "kill":
            self.kills += 1

    def read(self) -> None:
        self.read_producers()
        for group, reader in self._consumers.items():
            tally = self.groups[group]
            for _, record in reader.new_records():
                if record["event"] == "delivery":
                    tally.deliveries.append(Delivery(record["message_id"], record["attempt"]))
                elif record["event"] == "ack":
                    tally.acks.append(
                        AckRecord(record["message_id"], record["attempt"], Ack(record["outcome"]))
                    )
