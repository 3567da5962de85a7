"""An exactly-once soak producer: `python -m bench.soak.exactly_once.producer CONFIG_JSON`.

The consistency soak's producer (bench/soak/producer.py: one SDK
TransactionProducer per node, behaviors drawn per transaction, check-backs
answered from the barrier) whose messages carry an order (id, amount) and
whose local transaction writes that order beside the barrier row. Before it
sends, it registers the producers' database as its group's check source
(mode `only` or `fallback`, by its group), again until some node takes it,
so the coordinator can settle its half messages once it is dead.
"""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass

import psycopg

from bench.soak.behaviors import Behavior
from bench.soak.child_main import child_main
from bench.soak.exactly_once.stores import Order, insert_producer_order
from bench.soak.journal import JournalWriter
from bench.soak.producer import Fleet, ProducerConfig, SoakListener, produce
from coordinator.client import CoordinatorClientError, Message

REGISTER_EVERY_SECONDS = 1.0


@dataclass(frozen=True)
class OrderProducerConfig(ProducerConfig):
    check_source_url: str = ""  # the producers' database as the coordinator reaches it
    check_mode: str = "fallback"


class OrderListener(SoakListener):
    def write(self, conn: psycopg.Connection, msg: Message) -> None:
        assert msg.transaction_id is not None and msg.message_id is not None
        order = Order.from_body(msg.body_bytes)
        insert_producer_order(conn, order, msg.transaction_id, msg.message_id, self.config.run)


class CheckSource:
    """Registers the group's check source through whichever node answers first."""

    def __init__(self, config: OrderProducerConfig, fleet: Fleet, journal: JournalWriter) -> None:
        self.config = config
        self.fleet = fleet
        self.journal = journal
        self.registered = False
        self._attempt = 0

    def ensure(self, wait: threading.Event) -> None:
        while not self.registered and not wait.is_set():
            producers = self.fleet.producers
            producer = producers[self._attempt % len(producers)]
            self._attempt += 1
            try:
                producer.set_check_source(self.config.check_source_url, mode=self.config.check_mode)
            except CoordinatorClientError as error:
                logging.warning("check source not registered yet: %s", error)
                wait.wait(REGISTER_EVERY_SECONDS)
                continue
            self.registered = True
            self.journal.write(event="check_source", mode=self.config.check_mode)


def run(config: OrderProducerConfig) -> None:
    def begin(fleet: Fleet, journal: JournalWriter, stop: threading.Event) -> None:
        CheckSource(config, fleet, journal).ensure(stop)

    def message(
        journal: JournalWriter, sent: int, behavior: Behavior, rng: random.Random
    ) -> Message:
        order = Order(f"{config.name}-{sent}", rng.randint(1, 1_000_000))
        msg = Message(config.topic, order.body(), tags=behavior.value, keys=[order.order_id])
        # Before the half message: an order whose producer dies after
        # this line is known to have begun, committed or not.
        journal.write(event="order", order_id=order.order_id)
        return msg

    produce(config, OrderListener, message, begin)


def main(argv: list[str] | None = None) -> None:
    child_main(OrderProducerConfig, run, argv)


if __name__ == "__main__":
    main()
