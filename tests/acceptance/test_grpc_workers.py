"""`coordinator serve --workers 2 --grpc-port`: every worker serves the gRPC port, and a
check-back reaches a producer whose Telemetry stream another worker holds.

Each worker is a whole node: it binds the gRPC port itself (SO_REUSEPORT, the
kernel hands each connection to one of them), runs its own check-back rounds,
and learns of check requests through PostgreSQL. Which worker serves a
connection is read from the operating system: the worker whose socket's peer
is the connection's local port. The producer is the official Python client
(tests/rocketmq_python_client.py), its checker answering COMMIT; the other
calls are made with the raw stubs, one connection per channel.

Every process is stopped when its block ends, also on failure; every wait is
bounded.
"""

from __future__ import annotations

import http.client
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import grpc
import psutil
import psycopg
import pytest
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2_grpc

from bench.server import free_port
from tests.acceptance.test_rocketmq_python import eventually
from tests.grpc_door import OK, end_request, message, message_state, metadata, send_request
from tests.processes import coordinator_serve
from tests.rocketmq_python_client import producer_process

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("own_home")]

WITHIN = 60.0  # seconds for anything that should happen in a few
MOST_CONNECTIONS = 64  # tried until both workers serve one (each lands on either)
HALF_MESSAGES = 4  # left open for check-backs


def workers_listening(parent: psutil.Process, port: int) -> list[psutil.Process]:
    """The two worker processes, once each listens on the gRPC port itself."""

    def both() -> list[psutil.Process] | None:
        workers = [
            child
            for child in parent.children()
            if any("spawn_main" in part for part in child.cmdline())
        ]
        listening = [w for w in workers if any(_listens(c, port) for c in w.net_connections())]
        return listening if len(listening) == 2 else None

    return eventually(both, "two workers listening on the gRPC port")


def _listens(connection: Any, port: int) -> bool:
    return connection.status == psutil.CONN_LISTEN and connection.laddr.port == port


def worker_serving(workers: list[psutil.Process], local_port: int) -> psutil.Process:
    """The worker holding the server side of the connection from `local_port`."""

    def find() -> psutil.Process | None:
        for worker in workers:
            for connection in worker.net_connections(kind="tcp"):
                if connection.raddr and connection.raddr.port == local_port:
                    return worker
        return None

    return eventually(find, f"the worker serving the connection from port {local_port}")


def _own_ports(port: int) -> set[int]:
    """Local ports of this process's connections to `port`."""
    return {
        c.laddr.port
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
    }


def channels_on_both_workers(
    stack: ExitStack, workers: list[psutil.Process], port: int
) -> dict[int, Any]:
    """A stub per worker pid, each on a connection of its own that this worker serves."""
    stubs: dict[int, Any] = {}
    for _ in range(MOST_CONNECTIONS):
        before = _own_ports(port)
        channel = grpc.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)]
        )
        stack.callback(channel.close)
        grpc.channel_ready_future(channel).result(timeout=WITHIN)
        (local_port,) = eventually(
            lambda before=before: _own_ports(port) - before, "the channel's connection"
        )
        worker = worker_serving(workers, local_port)
        stubs.setdefault(worker.pid, service_pb2_grpc.MessagingServiceStub(channel))
        if len(stubs) == 2:
            return stubs
    raise AssertionError(f"{MOST_CONNECTIONS} connections all went to one worker")


def metrics_of_each(workers: list[psutil.Process], http_port: int) -> dict[int, Callable[[], str]]:
    """/metrics read from each worker, on an HTTP connection that worker serves."""
    readers: dict[int, Callable[[], str]] = {}
    for _ in range(MOST_CONNECTIONS):
        connection = http.client.HTTPConnection("127.0.0.1", http_port, timeout=WITHIN)
        connection.connect()
        worker = worker_serving(workers, connection.sock.getsockname()[1])
        if worker.pid in readers:
            connection.close()
            continue

        def read(connection: http.client.HTTPConnection = connection) -> str:
            connection.request("GET", "/metrics")
            return connection.getresponse().read().decode()

        readers[worker.pid] = read
        if len(readers) == 2:
            return readers
    raise AssertionError(f"{MOST_CONNECTIONS} HTTP connections all went to one worker")


@contextmanager
def stopped(worker: psutil.Process) -> Iterator[None]:
    """The worker paused (SIGSTOP) inside the block, and running again after it."""
    worker.suspend()
    try:
        yield
    finally:
        worker.resume()


def claimed_checks(metrics: str) -> float:
    found = re.search(r"^coordinator_check_backs_claimed_total (\S+)$", metrics, re.M)
    return float(found.group(1)) if found else 0.0


def test_workers_serve_the_grpc_port_and_check_backs_reach_a_stream_another_worker_holds(
    database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    grpc_port = free_port()
    with (
        coordinator_serve(
            database_url,
            tmp_path,
            serve_args=["--workers", "2"],
            grpc_port=grpc_port,
            metrics_open=True,
            # A first check-back within seconds, from rounds in both workers, and no second
            # one within the test: a check the worker without the stream claimed commits
            # only through the stream the other worker holds.
            transaction_timeout_seconds=1,
            check_interval_seconds=10 * WITHIN,
            check_scan_interval_seconds=0.3,
        ) as server,
        ExitStack() as stack,
    ):
        workers = workers_listening(psutil.Process(server.process.pid), grpc_port)
        endpoint = f"127.0.0.1:{grpc_port}"
        producer = stack.enter_context(
            producer_process(tmp_path, "producer", endpoint, [topic], "commit")
        )
        assert producer.started["settings_acknowledged"], producer.diagnostics()
        (producer_port,) = eventually(
            lambda: {
                c.laddr.port
                for c in psutil.Process(producer.process.pid).net_connections(kind="tcp")
                if c.raddr and c.raddr.port == grpc_port
            },
            "the producer's one connection",
        )
        holder = worker_serving(workers, producer_port)
        stubs = channels_on_both_workers(stack, workers, grpc_port)

        # Sends and ends on both workers, and a transaction ended on the other worker.
        pids = list(stubs)
        for sender, ender in [(pids[0], pids[0]), (pids[1], pids[1]), (pids[0], pids[1])]:
            sent = stubs[sender].SendMessage(
                send_request(message(topic, b"ended", kind=d.TRANSACTION)),
                metadata=metadata(),
                timeout=WITHIN,
            )
            assert sent.status.code == OK, sent.status.message
            ended = stubs[ender].EndTransaction(
                end_request(topic, sent.entries[0], d.COMMIT), metadata=metadata(), timeout=WITHIN
            )
            assert ended.status.code == OK, ended.status.message
            assert message_state(db, sent.entries[0].message_id) == ("committed", "client")

        # Half messages left open while the worker holding the producer's stream is
        # stopped (SIGSTOP): only the other worker's rounds can claim their checks, and the
        # holder sends them over its stream once it runs again.
        (other,) = [pid for pid in pids if pid != holder.pid]
        metrics = metrics_of_each(workers, int(server.url.rsplit(":", 1)[1]))
        opened = []
        for _ in range(HALF_MESSAGES):
            sent = stubs[other].SendMessage(
                send_request(message(topic, b"left open", kind=d.TRANSACTION)),
                metadata=metadata(),
                timeout=WITHIN,
            )
            assert sent.status.code == OK, sent.status.message
            opened.append(sent.entries[0].message_id)
        with stopped(holder):
            eventually(
                lambda: claimed_checks(metrics[other]()) > 0 or None,
                "a check claimed by the rounds of the worker without the stream",
            )

        for message_id in opened:
            eventually(
                lambda message_id=message_id: (
                    message_state(db, message_id) == ("committed", "check")
                ),
                f"{message_id} committed by its check-back",
            )
        checked = {event["message_id"] for event in producer.events("check")}
        assert set(opened) <= checked
