"""The failover load: producers and consumers on both doors of a running coordinator.

    config = LoadConfig(http_url, grpc_target)
    with Load(config) as load:        # subscribes the groups, starts the threads
        ...                           # faults, marked with time.monotonic()
        load.stop_producers()         # every transaction in progress is finished
        load.drain(timeout=60)        # consumers get what was committed
    result = verify(load.ledger, database_url)

Every thread stops by itself at `config.longest_run`; leaving the block
stops the rest, bounded by one request's timeout.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from types import TracebackType

import httpx

from bench.failover.config import LoadConfig
from bench.failover.grpc_door import GrpcConsumer, GrpcProducer
from bench.failover.http_door import HttpConsumer, HttpProducer, client, request
from bench.failover.ledger import Door, Kind, Ledger
from bench.failover.retrying import Retrier
from bench.failover.workers import Signals, Worker

# How often drain looks at the ledger.
DRAIN_POLL = 0.05


class Load:
    def __init__(self, config: LoadConfig) -> None:
        self.config = config
        self.ledger = Ledger(topic=config.topic, groups=config.groups)
        self._producers_stop = threading.Event()
        self._consumers_stop = threading.Event()
        self._aborted = threading.Event()
        self._threads: dict[str, list[threading.Thread]] = {"producers": [], "consumers": []}
        self.started_at: float | None = None

    # --- starting -------------------------------------------------------------
    def start(self) -> Load:
        """Subscribe the consumer groups, then start consumers and producers."""
        if self.started_at is not None:
            raise RuntimeError("the load was started already")
        self.started_at = time.monotonic()
        until = self.started_at + self.config.longest_run
        self._subscribe()
        config, ledger = self.config, self.ledger
        consumers = Signals(until, self._consumers_stop, self._aborted)
        producers = Signals(until, self._producers_stop, self._aborted)
        self._start(
            "consumers",
            [HttpConsumer(config, n, ledger, consumers) for n in range(config.http_consumers)]
            + [GrpcConsumer(config, n, ledger, consumers) for n in range(config.grpc_consumers)],
        )
        self._start(
            "producers",
            [HttpProducer(config, n, ledger, producers) for n in range(config.http_producers)]
            + [GrpcProducer(config, n, ledger, producers) for n in range(config.grpc_producers)],
        )
        return self

    def _subscribe(self) -> None:
        """Each consuming group subscribes to the topic before anything is sent: a
        subscription gets only what is committed after it."""
        config = self.config
        rng = random.Random(config.seed)
        retrier = Retrier(self.ledger, rng, self._aborted, config.retry_horizon)
        with client(config.http_url, config.request_timeout, config.token) as http:
            for group in config.groups:
                _subscribe(http, retrier, group, config.topic)

    def _start(self, role: str, workers: Sequence[Worker]) -> None:
        for worker in workers:
            thread = threading.Thread(target=worker.guarded_run, name=worker.name, daemon=True)
            self._threads[role].append(thread)
            thread.start()

    # --- stopping -------------------------------------------------------------
    def stop_producers(self, timeout: float | None = None) -> bool:
        """No new transaction; wait for those in progress to end (their retries
        included). True when every producer stopped within `timeout` (default:
        what two requests retried to the horizon can take)."""
        if timeout is None:
            timeout = 2 * (self.config.retry_horizon + self.config.request_timeout) + 5
        self._producers_stop.set()
        return _joined(self._threads["producers"], timeout)

    def drain(self, timeout: float, quiet: float = 2.0) -> bool:
        """Let the consumers run until every group received every acknowledged commit,
        and then until no group has received anything for `quiet` seconds (commits
        whose acknowledgement was lost come too). True when the first part was done
        within `timeout`."""
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        while True:
            now = time.monotonic()
            complete = self.ledger.undelivered_commits() == 0
            latest = max(self.ledger.last_delivery() or started, started)
            if complete and now - latest >= quiet:
                return True
            if now >= deadline:
                return complete
            time.sleep(DRAIN_POLL)

    def stop(self, timeout: float | None = None) -> None:
        """Stop every thread: no further attempt of anything. Raises if one is
        still running after `timeout` (default: one request's bound and a little)."""
        if timeout is None:
            timeout = self.config.request_timeout + self.config.wait_seconds + 5
        self._producers_stop.set()
        self._consumers_stop.set()
        self._aborted.set()
        threads = [*self._threads["producers"], *self._threads["consumers"]]
        if not _joined(threads, timeout):
            alive = [t.name for t in threads if t.is_alive()]
            raise RuntimeError(f"load threads did not stop within {timeout} s: {alive}")

    def __enter__(self) -> Load:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self.stop()
        except RuntimeError:
            if kind is None:
                raise  # else the block's own failure is the one to see


def _subscribe(http: httpx.Client, retrier: Retrier, group: str, topic: str) -> None:
    path = f"/v1/consumer-groups/{group}/subscriptions/{topic}"
    answered = retrier.until_answered(
        Door.HTTP,
        Kind.SUBSCRIBE,
        lambda: request(http, Kind.SUBSCRIBE, path, {"expression": "*"}, method="PUT"),
    )
    if answered is None or not answered[0].ok:
        raise RuntimeError(f"could not subscribe {group!r} to {topic!r}: {answered}")


def _joined(threads: Sequence[threading.Thread], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    return not any(thread.is_alive() for thread in threads)
