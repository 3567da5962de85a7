"""The official RocketMQ Node.js client against `coordinator serve --grpc-port`.

`rocketmq-client-nodejs`, pinned in tests/rocketmq_node/package.json (and its
lock file), unmodified, drives three scenarios through the gRPC door: a normal
message sent, received by a SimpleConsumer and acked; a transactional message
committed and received exactly once; a transactional message rolled back and
never received. A fourth lets the server's check-back reach the client's
transaction checker. What the client says is checked against the `messages`
table in plain SQL.

The package is installed once per module into a temporary directory, from a
persistent npm cache (offline when the cache has it). No node or npm, or a
failed install, fails these tests: a skip would hide that the door is no
longer proven against a real client.

The driver (tests/rocketmq_node/driver.mjs) prints one JSON object per line;
every process started here runs in a session of its own and is killed, its
whole group, however the test ends.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.rows import dict_row

from bench.server import free_port
from tests.processes import ServeProcess, coordinator_serve, stop_group

pytestmark = pytest.mark.slow

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "rocketmq_node"
PACKAGE_FILES = ("package.json", "package-lock.json", "driver.mjs")
# Outside the work tree and the test's temporary directories, so a second run
# (and CI on the same machine) installs from it without the network.
NPM_CACHE = Path.home() / ".cache" / "coordinator-npm"
INSTALL_SECONDS = 300.0
INSTALL_ATTEMPTS = 2
# The package's "engines" field.
MIN_NODE = (16, 19)
# One driver run: start-up, send, end, receiving and the quiet window, shutdown.
DRIVER_SECONDS = 120.0

TOPIC = "nodejs-orders"
GROUP = "nodejs-billing"
TAG = "created"


@dataclass(frozen=True)
class NodeClient:
    """The installed client: `driver` runs with `node` from `directory`."""

    node: str
    directory: Path

    @property
    def driver(self) -> Path:
        return self.directory / "driver.mjs"


def _run_bounded(
    command: list[str], cwd: Path, timeout: float, log: Path, output: Path | None = None
) -> tuple[int | None, str]:
    """Run `command` in a session of its own; kill its group on timeout.

    Returns the exit code (None on timeout) and what it wrote to `log`: its
    stderr, and its stdout too unless `output` takes that. Both go to files,
    not pipes, so a chatty child can never block on them.
    """
    with ExitStack() as files:
        errors = files.enter_context(log.open("wb"))
        written = files.enter_context(output.open("wb")) if output is not None else errors
        process = subprocess.Popen(
            command,
            cwd=cwd,
            stdout=written,
            stderr=errors,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        try:
            code: int | None = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
    finally:
        # npm or the client may leave children: nothing outlives the call.
        stop_group(process)
    return code, log.read_text(errors="replace")


def _node_version(node: str) -> tuple[int, ...]:
    out = subprocess.run(
        [node, "--version"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    match = re.match(r"v(\d+)\.(\d+)", out.strip())
    if match is None:
        pytest.fail(f"cannot read node's version from {out!r}")
    return tuple(int(part) for part in match.groups())


@pytest.fixture(scope="module")
def node_client(tmp_path_factory: pytest.TempPathFactory) -> NodeClient:
    """rocketmq-client-nodejs installed (npm ci) into a temporary directory."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("node and npm are needed to test the official RocketMQ Node.js client")
    version = _node_version(node)
    if version < MIN_NODE:
        pytest.fail(f"rocketmq-client-nodejs needs node >= {MIN_NODE}, found {version}")
    directory = tmp_path_factory.mktemp("rocketmq-node")
    for name in PACKAGE_FILES:
        shutil.copy2(PACKAGE_DIR / name, directory / name)
    NPM_CACHE.mkdir(parents=True, exist_ok=True)
    command = [
        npm,
        "ci",
        "--prefix",
        str(directory),
        "--cache",
        str(NPM_CACHE),
        # From the cache when it has the pinned versions, the registry otherwise.
        "--prefer-offline",
        # The lock file pins every package; no install script is needed
        # (protobufjs's only checks versions) and none should run.
        "--ignore-scripts",
        "--no-audit",
        "--no-fund",
        "--loglevel=warn",
    ]
    output = ""
    for attempt in range(1, INSTALL_ATTEMPTS + 1):
        code, output = _run_bounded(
            command, directory, INSTALL_SECONDS, directory / f"npm-ci-{attempt}.log"
        )
        if code == 0:
            return NodeClient(node, directory)
    pytest.fail(
        f"npm could not install rocketmq-client-nodejs ({INSTALL_ATTEMPTS} attempts, "
        f"{INSTALL_SECONDS:.0f} s each at most); last output:\n{output}"
    )


@dataclass
class DriverRun:
    """What one driver run printed: its events in order, its log, its exit code."""

    events: list[dict[str, Any]]
    log: str
    exit_code: int | None  # None: killed on timeout
    server: ServeProcess

    def of(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event]

    def one(self, event: str) -> dict[str, Any]:
        found = self.of(event)
        assert len(found) == 1, f"expected one {event!r} event, got {len(found)}\n{self}"
        return found[0]

    def __str__(self) -> str:
        # Enough to tell a client-side failure from a server-side one.
        events = "\n".join(json.dumps(e) for e in self.events)
        return (
            f"driver exit code: {self.exit_code}\n"
            f"--- driver events ---\n{events}\n"
            f"--- driver log (last 6000 characters) ---\n{self.log[-6000:]}\n"
            f"--- server output (last 6000 characters) ---\n{self.server.output()[-6000:]}"
        )


def run_driver(
    client: NodeClient,
    server: ServeProcess,
    endpoint: str,
    scenario: str,
    workdir: Path,
    receive_seconds: float = 30,
    quiet_seconds: float = 4,
    extra: Sequence[str] = (),
) -> DriverRun:
    """Run one scenario of the driver to its end, bounded by DRIVER_SECONDS."""
    log = workdir / f"driver-{scenario}.log"
    events_file = workdir / f"driver-{scenario}.jsonl"
    command = [
        client.node,
        str(client.driver),
        "--endpoint",
        endpoint,
        "--topic",
        TOPIC,
        "--group",
        GROUP,
        "--scenario",
        scenario,
        "--tag",
        TAG,
        "--receive-seconds",
        str(receive_seconds),
        "--quiet-seconds",
        str(quiet_seconds),
        *extra,
    ]
    exit_code, errors = _run_bounded(
        command, client.directory, DRIVER_SECONDS, log, output=events_file
    )
    events = []
    for line in events_file.read_text(errors="replace").splitlines():
        if line.strip():
            events.append(json.loads(line))
    return DriverRun(events, errors, exit_code, server)


@pytest.fixture
def grpc_server(database_url: str, tmp_path: Path) -> Iterator[tuple[ServeProcess, str]]:
    """`coordinator serve --grpc-port` on this test's database, and its gRPC endpoint."""
    grpc_port = free_port()
    with coordinator_serve(database_url, tmp_path, grpc_port=grpc_port) as server:
        yield server, f"127.0.0.1:{grpc_port}"


def message_row(db: psycopg.Connection, message_id: str) -> dict[str, Any]:
    with db.cursor(row_factory=dict_row) as cursor:
        row = cursor.execute(
            "SELECT id, kind, state, topic, producer_group, tags, keys, body, "
            "transaction_id, resolution_source FROM messages WHERE message_id = %s",
            (message_id,),
        ).fetchone()
    assert row is not None, f"no row in messages for message_id {message_id}"
    return row


def timeline(db: psycopg.Connection, message_id: str) -> list[tuple[str, str | None, str]]:
    """The message's history: (source, from_state, to_state), oldest first."""
    with db.cursor() as cursor:
        return [
            (source, from_state, to_state)
            for source, from_state, to_state in cursor.execute(
                "SELECT source, from_state, to_state FROM message_timeline "
                "WHERE message_id = %s ORDER BY at, history_id",
                (message_id,),
            ).fetchall()
        ]


def unacked_deliveries(db: psycopg.Connection) -> int:
    """The group's deliveries not acked yet (an ack deletes its row)."""
    with db.cursor() as cursor:
        row = cursor.execute(
            "SELECT count(*) FROM deliveries WHERE consumer_group = %s", (GROUP,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def subscribed_topics(db: psycopg.Connection) -> list[str]:
    with db.cursor() as cursor:
        return [
            topic
            for (topic,) in cursor.execute(
                "SELECT topic FROM subscriptions WHERE consumer_group = %s ORDER BY topic",
                (GROUP,),
            ).fetchall()
        ]


def assert_started(run: DriverRun) -> None:
    """Both clients started, in order: the consumer's subscription came first."""
    names = [e["event"] for e in run.events]
    assert "consumer_started" in names, f"the SimpleConsumer did not start\n{run}"
    assert "producer_started" in names, f"the Producer did not start\n{run}"
    assert names.index("consumer_started") < names.index("producer_started")


def assert_received_once(run: DriverRun, message_id: str, body: str) -> dict[str, Any]:
    """The message came exactly once, intact, and its ack was accepted."""
    received = run.of("received")
    assert [r["message_id"] for r in received] == [message_id], (
        f"expected {message_id} exactly once\n{run}"
    )
    message = received[0]
    assert message["topic"] == TOPIC
    assert message["tag"] == TAG
    assert message["body"] == body
    assert message["corrupted"] is False, f"the client found the body digest wrong\n{run}"
    assert message["has_receipt_handle"] is True
    assert message["delivery_attempt"] == 1
    assert [a["message_id"] for a in run.of("acked")] == [message_id], f"ack failed\n{run}"
    return message


def assert_clean_exit(run: DriverRun) -> None:
    assert run.exit_code == 0 and not run.of("error"), f"the driver failed\n{run}"
    assert not run.of("shutdown_error"), f"a client did not shut down cleanly\n{run}"
    assert run.of("done"), f"the driver did not finish\n{run}"


def test_normal_message_is_sent_received_and_acked(
    node_client: NodeClient,
    grpc_server: tuple[ServeProcess, str],
    db: psycopg.Connection,
    tmp_path: Path,
) -> None:
    server, endpoint = grpc_server
    run = run_driver(node_client, server, endpoint, "normal", tmp_path)
    assert_started(run)
    assert_clean_exit(run)
    sent = run.one("sent")
    message = assert_received_once(run, sent["message_id"], "hello from node, normal")
    assert message["keys"] == ["key-normal"]
    assert message["properties"] == {"scenario": "normal"}

    row = message_row(db, sent["message_id"])
    assert row["kind"] == "normal"
    assert row["state"] == "committed"
    assert row["topic"] == TOPIC
    assert row["tags"] == TAG
    assert row["keys"] == ["key-normal"]
    assert bytes(row["body"]) == b"hello from node, normal"
    assert subscribed_topics(db) == [TOPIC]
    assert unacked_deliveries(db) == 0
    assert run.one("done")["checks"] == 0


def test_committed_transactional_message_is_received_exactly_once(
    node_client: NodeClient,
    grpc_server: tuple[ServeProcess, str],
    db: psycopg.Connection,
    tmp_path: Path,
) -> None:
    server, endpoint = grpc_server
    run = run_driver(node_client, server, endpoint, "commit", tmp_path)
    assert_started(run)
    assert_clean_exit(run)
    sent = run.one("sent")
    assert sent["transaction_id"], f"SendMessage gave no transaction id\n{run}"
    # The half message reached no consumer before its commit.
    assert run.one("before_end")["received"] == 0, run
    assert run.one("committed")["message_id"] == sent["message_id"]
    assert_received_once(run, sent["message_id"], "hello from node, commit")

    row = message_row(db, sent["message_id"])
    assert row["kind"] == "transactional"
    assert row["state"] == "committed"
    assert row["transaction_id"] == sent["transaction_id"]
    # gRPC has no producer group: the topic is the group.
    assert row["producer_group"] == TOPIC
    assert row["resolution_source"] == "client"
    assert timeline(db, sent["message_id"]) == [
        ("client", None, "prepared"),
        ("client", "prepared", "committed"),
    ]
    assert unacked_deliveries(db) == 0
    # Ended by the client at once: no check-back was needed.
    assert run.one("done")["checks"] == 0


def test_rolled_back_transactional_message_is_never_received(
    node_client: NodeClient,
    grpc_server: tuple[ServeProcess, str],
    db: psycopg.Connection,
    tmp_path: Path,
) -> None:
    server, endpoint = grpc_server
    # Watch for 6 s after the rollback: anything delivered would show.
    run = run_driver(node_client, server, endpoint, "rollback", tmp_path, receive_seconds=6)
    assert_started(run)
    assert_clean_exit(run)
    sent = run.one("sent")
    assert sent["transaction_id"], f"SendMessage gave no transaction id\n{run}"
    assert run.one("rolled_back")["message_id"] == sent["message_id"]
    assert run.of("received") == [], f"a rolled-back message was delivered\n{run}"

    row = message_row(db, sent["message_id"])
    assert row["kind"] == "transactional"
    assert row["state"] == "rolled_back"
    assert row["resolution_source"] == "client"
    assert timeline(db, sent["message_id"]) == [
        ("client", None, "prepared"),
        ("client", "prepared", "rolled_back"),
    ]
    assert unacked_deliveries(db) == 0
    assert run.one("done")["checks"] == 0


# A half message nobody ends is checked back within about a second.
FAST_CHECKS: dict[str, object] = {
    "transaction_timeout_seconds": 1,
    "check_interval_seconds": 5,
    "check_scan_interval_seconds": 0.3,
}


def test_check_back_reaches_the_node_checker_which_commits(
    node_client: NodeClient, database_url: str, db: psycopg.Connection, tmp_path: Path
) -> None:
    grpc_port = free_port()
    with coordinator_serve(database_url, tmp_path, grpc_port=grpc_port, **FAST_CHECKS) as server:
        run = run_driver(node_client, server, f"127.0.0.1:{grpc_port}", "checkback", tmp_path)
    assert_started(run)
    assert_clean_exit(run)
    sent = run.one("sent")
    # RecoverOrphanedTransactionCommand on the producer's Telemetry stream,
    # answered by EndTransaction with source SERVER_CHECK.
    checks = run.of("check")
    assert checks, f"no check-back reached the Node producer's checker\n{run}"
    assert {c["message_id"] for c in checks} == {sent["message_id"]}
    assert_received_once(run, sent["message_id"], "hello from node, checkback")

    row = message_row(db, sent["message_id"])
    assert row["state"] == "committed"
    assert row["resolution_source"] == "check"
    assert timeline(db, sent["message_id"])[-1] == ("check", "prepared", "committed")
    assert unacked_deliveries(db) == 0


def test_sql92_filter_selects_by_properties_and_a_bad_one_is_refused(
    node_client: NodeClient,
    grpc_server: tuple[ServeProcess, str],
    db: psycopg.Connection,
    tmp_path: Path,
) -> None:
    server, endpoint = grpc_server
    run = run_driver(node_client, server, endpoint, "sql92", tmp_path)
    assert_started(run)
    assert_clean_exit(run)
    sent = {event["name"]: event["message_id"] for event in run.of("sent")}
    message = assert_received_once(run, sent["big"], "hello from node, sql92")
    assert message["properties"] == {"amount": "150"}
    refused = run.one("refused")
    assert "position 10" in json.dumps(refused), f"not refused for the expression\n{run}"
    with db.cursor() as cursor:
        rows = cursor.execute(
            "SELECT consumer_group, filter_type, expression FROM subscriptions ORDER BY 1"
        ).fetchall()
    assert rows == [(GROUP, "sql92", f"amount > 100 AND TAGS = '{TAG}'")]


def test_delay_message_arrives_at_its_time_and_another_is_recalled(
    node_client: NodeClient,
    grpc_server: tuple[ServeProcess, str],
    db: psycopg.Connection,
    tmp_path: Path,
) -> None:
    server, endpoint = grpc_server
    run = run_driver(node_client, server, endpoint, "delay", tmp_path)
    assert_started(run)
    assert_clean_exit(run)
    sent = run.one("sent")
    assert sent["has_recall_handle"]
    message = assert_received_once(run, sent["message_id"], "hello from node, delay")
    assert message["delivery_timestamp"] == sent["delivery_timestamp"]
    assert message["received_at"] >= sent["delivery_timestamp"]
    recalled = run.one("recalled")
    assert recalled["answer"] in (None, recalled["message_id"])
    history = db.execute(
        "SELECT h.detail FROM message_history h JOIN messages m ON m.id = h.message_offset"
        " WHERE m.message_id = %s ORDER BY h.id",
        (recalled["message_id"],),
    ).fetchall()
    assert history[-1] == ("recalled",)
    assert unacked_deliveries(db) == 0


# --- the PushConsumer, on a second node of the same database -------------------------------


@pytest.fixture
def two_nodes(database_url: str, tmp_path: Path) -> Iterator[list[tuple[ServeProcess, str]]]:
    """Two coordinator nodes with gRPC doors on this test's database."""
    with ExitStack() as stack:
        nodes = []
        for name in ("node-a", "node-b"):
            grpc_port = free_port()
            server = stack.enter_context(
                coordinator_serve(
                    database_url,
                    tmp_path,
                    name,
                    grpc_port=grpc_port,
                    transaction_timeout_seconds=1,
                    check_interval_seconds=2,
                    check_scan_interval_seconds=0.5,
                    # The push consumer's shutdown waits for its receive's long
                    # poll, whose length the Settings answer gives it.
                    max_long_poll_seconds=3,
                )
            )
            nodes.append((server, f"127.0.0.1:{grpc_port}"))
        yield nodes


def consumed(run: DriverRun, message_id: str) -> list[dict[str, Any]]:
    return sorted(
        (e for e in run.of("consumed") if e["message_id"] == message_id),
        key=lambda e: e["began"],
    )


def group_rows(db: psycopg.Connection, table: str) -> int:
    row = db.execute(f"SELECT count(*) FROM {table} WHERE consumer_group = %s", (GROUP,)).fetchone()
    assert row is not None
    return int(row[0])


def test_push_consumer_on_another_node_consumes_each_message_once_and_retries(
    node_client: NodeClient,
    two_nodes: list[tuple[ServeProcess, str]],
    db: psycopg.Connection,
    tmp_path: Path,
) -> None:
    (server, first), (_, second) = two_nodes
    run = run_driver(
        node_client, server, first, "push", tmp_path, extra=["--consumer-endpoint", second]
    )
    assert_clean_exit(run)
    expected = run.one("expected")["message_ids"]
    succeeded = [e["message_id"] for e in run.of("consumed") if e["result"] == "success"]
    assert sorted(succeeded) == sorted(expected), f"each message consumed once\n{run}"
    assert consumed(run, run.one("rolled_back")["message_id"]) == []
    assert run.one("done")["checks"] == 1  # the open transaction, committed by its check-back

    failing = expected[-1]
    first_try, retry = consumed(run, failing)
    assert (first_try["result"], first_try["delivery_attempt"]) == ("failure", 1)
    assert (retry["result"], retry["delivery_attempt"]) == ("success", 2)
    # The client asks for next to no delay; the group's backoff (1 s) holds.
    assert retry["began"] - first_try["ended"] >= 0.9, str(run)
    assert group_rows(db, "deliveries") == 0


def test_fifo_push_consumer_keeps_each_message_group_in_order(
    node_client: NodeClient,
    two_nodes: list[tuple[ServeProcess, str]],
    db: psycopg.Connection,
    tmp_path: Path,
) -> None:
    (server, first), (node_b, second) = two_nodes
    made = httpx.put(
        f"{node_b.url}/v1/consumer-groups/{GROUP}/subscriptions/{TOPIC}",
        json={"expression": "*", "fifo": True, "max_delivery_attempts": 2},
        timeout=30,
    )
    assert made.status_code == 201, made.text
    run = run_driver(
        node_client,
        server,
        first,
        "push-fifo",
        tmp_path,
        extra=["--consumer-endpoint", second, "--fail-times=-1"],
    )
    assert_clean_exit(run)
    expected = run.one("expected")["message_ids"]
    succeeded = [e["message_id"] for e in run.of("consumed") if e["result"] == "success"]
    assert sorted(succeeded) == sorted(expected), str(run)
    for message_group in ("g1", "g2"):
        ids = [e["message_id"] for e in run.of("sent") if e["message_group"] == message_group]
        events = sorted(
            (e for e in run.of("consumed") if e["message_id"] in ids), key=lambda e: e["began"]
        )
        assert list(dict.fromkeys(e["message_id"] for e in events)) == ids, str(run)
        for earlier, later in itertools.pairwise(events):
            assert later["began"] >= earlier["ended"], f"{message_group}: two in flight\n{run}"
    (buried,) = [e["message_id"] for e in run.of("sent") if e["body"].startswith("fail-")]
    assert [e["result"] for e in consumed(run, buried)] == ["failure", "failure"]
    assert group_rows(db, "dead_letters") == 1
    assert group_rows(db, "deliveries") == 0
