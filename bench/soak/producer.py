"""A soak producer process: `python -m bench.soak.producer CONFIG_JSON`.

It sends transactional messages through one SDK TransactionProducer per
coordinator node (a half message that no node accepts is sent again, with the
same message id, to the next one), runs a local transaction per message in
the producers' own database as drawn from `behaviors`, and answers
check-backs from the barrier. Once the file `stop_load_file` exists it sends
no more (check-backs are still answered); SIGTERM shuts down. A file rather
than a signal: a process still importing would die of a signal's default
action.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.soak import truth
from bench.soak.behaviors import Behavior, draw
from bench.soak.child_main import child_main
from bench.soak.journal import JournalWriter
from coordinator.client import (
    CoordinatorClientError,
    CoordinatorUnavailable,
    LocalTransactionState,
    Message,
    RetryPolicy,
    TransactionListener,
    TransactionProducer,
)

# Enough to ride out a node restart; an end that still fails is left to
# check-back, which is part of what the soak exercises.
RETRY = RetryPolicy(retry_seconds=3.0, initial_delay=0.1, max_delay=1.0)
RESTART_EVERY_SECONDS = 2.0  # how often a producer whose node was down tries again
AVOID_FAILED_NODE_SECONDS = 3.0


@dataclass(frozen=True)
class ProducerConfig:
    name: str  # slot and generation, e.g. "p3.2": unique per process
    endpoints: list[str]
    truth_url: str
    producer_group: str
    topic: str
    run: str
    seed: int
    journal: str
    stop_load_file: str
    think_seconds: float
    # The n-th transaction of this process kills it whatever the draw, so a
    # short run has producer kills for certain (None: only the drawn ones).
    kill_at: int | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))


class LocalTransactionFailed(Exception):
    """What the RAISE behaviors raise: the SDK must answer UNKNOWN."""


class SoakListener(TransactionListener):
    def __init__(self, config: ProducerConfig, journal: JournalWriter) -> None:
        self.config = config
        self.journal = journal

    def _connect(self) -> psycopg.Connection:
        return psycopg.connect(self.config.truth_url, connect_timeout=5)

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        behavior = Behavior(arg)
        tid, message_id = msg.transaction_id, msg.message_id
        assert tid is not None and message_id is not None
        self.journal.write(
            event="transaction", message_id=message_id, transaction_id=tid, behavior=behavior
        )
        conn = self._connect()
        try:
            # The barrier row first, so a concurrent check-back waits for
            # the whole local transaction (see coordinator.client.barrier).
            truth.BARRIER.mark_committed(conn, tid)
            self.write(conn, msg)
            if behavior is Behavior.KILLED:
                self._die(message_id)
            if behavior in (Behavior.ROLLBACK, Behavior.UNKNOWN_ROLLED_BACK, Behavior.RAISE):
                conn.rollback()
                if behavior is Behavior.RAISE:
                    raise LocalTransactionFailed(message_id)
                if behavior is Behavior.ROLLBACK:
                    return LocalTransactionState.ROLLBACK
                return LocalTransactionState.UNKNOWN
            conn.commit()
            if behavior is Behavior.KILLED_COMMITTED:
                self._die(message_id)
            if behavior is Behavior.RAISE_COMMITTED:
                raise LocalTransactionFailed(message_id)
            if behavior is Behavior.COMMIT:
                return LocalTransactionState.COMMIT
            return LocalTransactionState.UNKNOWN
        finally:
            conn.close()

    def write(self, conn: psycopg.Connection, msg: Message) -> None:
        """The local transaction's business write, after the barrier row."""
        assert msg.transaction_id is not None and msg.message_id is not None
        truth.insert_order(conn, msg.transaction_id, msg.message_id, self.config.run)

    def check_local_transaction(self, msg: Message) -> LocalTransactionState:
        assert msg.transaction_id is not None
        with self._connect() as conn:
            state = truth.BARRIER.check(conn, msg.transaction_id)
            conn.commit()
        self.journal.write(event="check", message_id=msg.message_id, answer=state)
        return state

    def _die(self, message_id: str) -> None:
        """Between the half message and its end, as a crash would."""
        self.journal.write(event="kill", message_id=message_id)
        os.kill(os.getpid(), signal.SIGKILL)


class Fleet:
    """One TransactionProducer per node, all in one producer group."""

    def __init__(self, config: ProducerConfig, listener: SoakListener) -> None:
        self.producers = [
            TransactionProducer(
                config.producer_group,
                listener,
                endpoint,
                instance_id=f"{config.name}-n{index}",
                heartbeat_interval=1.0,
                check_wait_seconds=2.0,
                timeout=5.0,
                retry=RETRY,
            )
            for index, endpoint in enumerate(config.endpoints)
        ]
        self._started: list[bool] = [False] * len(self.producers)
        self._avoid_until: list[float] = [0.0] * len(self.producers)
        self._next_try = 0.0

    def ensure_started(self) -> None:
        if all(self._started) or time.monotonic() < self._next_try:
            return
        self._next_try = time.monotonic() + RESTART_EVERY_SECONDS
        for index, producer in enumerate(self.producers):
            if self._started[index]:
                continue
            try:
                producer.start()
                self._started[index] = True
            except CoordinatorClientError:
                continue  # that node is down: tried again a little later

    def send(self, msg: Message, behavior: Behavior, rng: random.Random) -> bool:
        """Send on a started producer, failing over to the others; False if none took it.

        A node that just failed is tried last for a while, as a client's
        load balancer would: each try of a dead node costs the SDK's retries.
        """
        now = time.monotonic()
        started = [i for i, ok in enumerate(self._started) if ok]
        rng.shuffle(started)
        started.sort(key=lambda i: self._avoid_until[i] > now)
        for index in started:
            try:
                self.producers[index].send_message_in_transaction(msg, behavior.value)
                return True
            except CoordinatorUnavailable:
                self._avoid_until[index] = time.monotonic() + AVOID_FAILED_NODE_SECONDS
        return False

    def shutdown(self) -> None:
        """All at once: each waits for its long poll to end, then deregisters."""
        threads = [
            threading.Thread(target=producer.shutdown)
            for producer, started in zip(self.producers, self._started, strict=True)
            if started
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)


def run(config: ProducerConfig) -> None:
    def message(
        journal: JournalWriter, sent: int, behavior: Behavior, rng: random.Random
    ) -> Message:
        return Message(
            config.topic,
            f"order {config.name}-{sent}",
            tags=behavior.value,
            keys=[f"{config.name}-{sent}"],
        )

    produce(config, SoakListener, message)


MessageFor = Callable[[JournalWriter, int, Behavior, random.Random], Message]


def produce(
    config: ProducerConfig,
    listener: type[SoakListener],
    message: MessageFor,
    begin: Callable[[Fleet, JournalWriter, threading.Event], None] | None = None,
) -> None:
    """Both soaks' producer process: transactions until the stop-load file, then check-backs.

    `message(journal, sent, behavior, rng)` makes the `sent`-th transaction's
    message; `begin(fleet, journal, stop)` runs once before the load.
    """
    stop_load, stop = stop_events(config)
    journal = JournalWriter(Path(config.journal))
    fleet = Fleet(config, listener(config, journal))
    rng = random.Random(f"{config.seed}:{config.name}")
    sent = 0
    try:
        if begin is not None:
            begin(fleet, journal, stop)
        while not stop_load.is_set():
            fleet.ensure_started()
            behavior = draw(rng)
            sent += 1
            if sent == config.kill_at:
                behavior = rng.choice([Behavior.KILLED, Behavior.KILLED_COMMITTED])
            msg = message(journal, sent, behavior, rng)
            if not fleet.send(msg, behavior, rng):
                journal.write(event="prepare_failed", message_id=msg.message_id)
                stop_load.wait(0.2)
            stop_load.wait(rng.uniform(0, config.think_seconds))
        idle_until(stop, fleet, journal)
    finally:
        fleet.shutdown()
        journal.close()


def stop_events(config: ProducerConfig) -> tuple[threading.Event, threading.Event]:
    """(stop_load, stop): SIGTERM sets both, the stop-load file only the first."""
    stop_load, stop = threading.Event(), threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: (stop_load.set(), stop.set()))
    threading.Thread(
        target=watch_stop_file, args=(Path(config.stop_load_file), stop_load), daemon=True
    ).start()
    return stop_load, stop


def idle_until(stop: threading.Event, fleet: Fleet, journal: JournalWriter) -> None:
    journal.write(event="idle")
    while not stop.wait(0.5):
        fleet.ensure_started()  # keep answering check-backs on every node


def watch_stop_file(flag: Path, stop_load: threading.Event) -> None:
    while not stop_load.wait(0.2):
        if flag.exists():
            stop_load.set()


def main(argv: list[str] | None = None) -> None:
    child_main(ProducerConfig, run, argv)


if __name__ == "__main__":
    main()
