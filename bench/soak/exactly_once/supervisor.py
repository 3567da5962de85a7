"""The exactly-once run's processes: the consistency soak's supervisor, with its own clients.

Producers are split between producer groups by check-source mode (slot i in
group i mod 2: `only`, `fallback`); each consumer group has several consumer
processes. SIGKILLs, whether a producer's own (a drawn behavior) or the kill
plan's, are counted as kills; a process the plan keeps down is started again
once its time is up.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.soak import children
from bench.soak.exactly_once.consumer import InboxConsumerConfig
from bench.soak.exactly_once.producer import OrderProducerConfig
from bench.soak.layout import CONSUMER_GROUPS, Layout
from bench.soak.supervisor import ClientOptions, ProducerSlot, Supervisor

CHECK_MODES = ("only", "fallback")  # producer group i mod 2


@dataclass(frozen=True)
class InboxClientOptions(ClientOptions):
    consumers_per_group: int = 2
    fail_probability: float = 0.05


@dataclass(frozen=True)
class Stores:
    truth_url: str  # the producers' database, as the soak reaches it
    check_source_url: str  # the same, as the coordinator reaches it (TCP)
    consumer_urls: dict[str, str]  # consumer group name -> its database


def producer_group(layout: Layout, mode: str) -> str:
    return f"{layout.producer_group}-{mode}"


class InboxSupervisor(Supervisor):
    options: InboxClientOptions

    def __init__(
        self,
        layout: Layout,
        options: InboxClientOptions,
        database_url: str,
        stores: Stores,
        nodes: int,
        report: Callable[[str], None],
    ) -> None:
        super().__init__(layout, options, database_url, stores.truth_url, nodes, report)
        self.stores = stores
        self._held_until: dict[str, float] = {}  # process key -> when it may start again
        self.consumer_kills = 0

    @property
    def consumer_keys(self) -> list[str]:
        return [f"{g}{i}" for g in CONSUMER_GROUPS for i in range(self.options.consumers_per_group)]

    @staticmethod
    def mode_of(slot: int) -> str:
        return CHECK_MODES[slot % len(CHECK_MODES)]

    # starting ------------------------------------------------------------------
    def start_clients(self) -> None:
        for key in self.consumer_keys:
            self._start_consumer(key)
        for slot in self.producers:
            self._start_producer(slot)

    def _start_producer(self, slot: ProducerSlot) -> None:
        mode = self.mode_of(slot.index)
        config = OrderProducerConfig(
            name=slot.name,
            endpoints=[node.url for node in self.nodes],
            truth_url=self.stores.truth_url,
            producer_group=producer_group(self.layout, mode),
            topic=self.layout.topic,
            run=self.layout.run_id,
            seed=self.options.seed,
            journal=str(self.layout.producer_journals / f"{slot.name}.jsonl"),
            stop_load_file=str(self.layout.stop_load_file),
            think_seconds=self.options.think_seconds,
            kill_at=self._kill_at(slot),
            check_source_url=self.stores.check_source_url,
            check_mode=mode,
        )
        slot.process = self._spawn(
            "bench.soak.exactly_once.producer", config.to_json(), f"producer-{slot.name}.log"
        )

    def _start_consumer(self, key: str) -> None:
        group = key[0]
        journals = self.layout.consumer_journals(group)
        generation = sum(1 for _ in journals.glob(f"c{key}.*.jsonl"))
        name = f"c{key}.{generation}"
        config = InboxConsumerConfig(
            name=name,
            endpoints=[node.url for node in self.nodes],
            consumer_group=self.layout.consumer_group(group),
            topic=self.layout.topic,
            run=self.layout.run_id,
            database_url=self.stores.consumer_urls[group],
            seed=self.options.seed,
            journal=str(journals / f"{name}.jsonl"),
            threads=self.options.consumer_threads,
            no_ack_probability=self.options.no_ack_probability,
            fail_probability=self.options.fail_probability,
            invisible_seconds=self.options.invisible_seconds,
        )
        # The journal file exists from now on, so the next generation counts it.
        Path(config.journal).touch()
        self.consumers[key] = self._spawn(
            "bench.soak.exactly_once.consumer", config.to_json(), f"consumer-{name}.log"
        )

    # the kill plan's callbacks ------------------------------------------------------
    def kill_producer(self, index: int, down_seconds: float) -> int:
        slot = self.producers[index % len(self.producers)]
        return self._kill_slots([slot], down_seconds)

    def kill_group(self, group: int, down_seconds: float) -> int:
        mode = CHECK_MODES[group % len(CHECK_MODES)]
        slots = [s for s in self.producers if self.mode_of(s.index) == mode]
        return self._kill_slots(slots, down_seconds)

    def kill_consumer(self, index: int, down_seconds: float) -> str:
        key = self.consumer_keys[index % len(self.consumer_keys)]
        process = self.consumers.get(key)
        if process is not None:
            children.kill(process)
        self._held_until[key] = time.monotonic() + down_seconds
        return key

    def _kill_slots(self, slots: list[ProducerSlot], down_seconds: float) -> int:
        killed = 0
        for slot in slots:
            if slot.process is not None and slot.process.poll() is None:
                children.kill(slot.process)
                killed += 1
            self._held_until[f"p{slot.index}"] = time.monotonic() + down_seconds
        return killed

    def release(self) -> None:
        """No process is kept down any more (the load is over)."""
        self._held_until.clear()

    def _held(self, key: str) -> bool:
        return time.monotonic() < self._held_until.get(key, 0.0)

    # watching --------------------------------------------------------------------
    def _held_down(self, slot: ProducerSlot) -> bool:
        return self._held(f"p{slot.index}")

    def _supervise_consumers(self) -> None:
        for key, process in list(self.consumers.items()):
            if process.poll() is None or self._held(key):
                continue
            if process.returncode == -signal.SIGKILL:
                self.consumer_kills += 1
            else:
                self.counts.consumer_exits += 1
                self._event(f"consumer {key} exited with {process.returncode}")
            self._start_consumer(key)
