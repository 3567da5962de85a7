"""`coordinator serve --workers N`: N processes, each a whole node, sharing the listening socket.

The parent resolved and migrated the database; each worker opens its own
pool, runs its own check-back rounds (SKIP LOCKED keeps them apart) and
serves the same HTTP socket (the kernel hands each connection to one of
them) and, with SO_REUSEPORT, the same gRPC port.
"""

from __future__ import annotations

import logging
import logging.config
import multiprocessing
import signal
import socket
import threading
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

from coordinator.config import Settings
from coordinator.node.process import serve_node

log = logging.getLogger(__name__)

# How often the parent looks at its workers.
WATCH_SECONDS = 0.5

# What a worker that failed before it served answers with (uvicorn's number).
STARTUP_FAILURE = 3


def serve_workers(
    database_url: str,
    settings: Settings,
    http_socket: socket.socket,
    workers: int,
    log_config: dict[str, Any],
) -> int:
    """Run the workers until SIGTERM or SIGINT; 0, or 1 if a worker could not start.

    A worker that dies is replaced, unless it failed to start its node (its
    exit status says so): then its replacement would fail the same way, and
    all of them stop.
    """
    spawn = multiprocessing.get_context("spawn")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}

    def start() -> BaseProcess:
        process = spawn.Process(
            target=_worker,
            args=(database_url, settings, http_socket, log_config),
            name="coordinator-worker",
        )
        process.start()
        return process

    status = 0
    running = [start() for _ in range(workers)]
    try:
        while not stop.wait(WATCH_SECONDS):
            for index, worker in enumerate(running):
                if worker.is_alive():
                    continue
                if worker.exitcode == STARTUP_FAILURE:
                    log.error("a worker failed to start: stopping")
                    status = 1
                    stop.set()
                    break
                log.warning(
                    "worker %s died (exit %s): starting another",
                    worker.pid,
                    worker.exitcode,
                )
                running[index] = start()
    finally:
        for worker in running:
            if worker.is_alive():
                worker.terminate()  # SIGTERM: the worker's node stops gracefully
        for worker in running:
            worker.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return status


def _worker(
    database_url: str,
    settings: Settings,
    http_socket: socket.socket,
    log_config: dict[str, Any],
) -> None:
    logging.config.dictConfig(log_config)
    started = threading.Event()
    try:
        serve_node(database_url, settings, [http_socket], on_started=started.set)
    except Exception:
        log.exception("the worker stopped")
        raise SystemExit(1 if started.is_set() else STARTUP_FAILURE) from None
