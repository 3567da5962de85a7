"""Attacks on the RocketMQ gRPC door itself, each against a served coordinator.

GZIP bombs in SendMessage (refused by a token that may not send before
anything is unpacked; unpacked within max_body_bytes per message and
max_request_bytes per request, with /health answering meanwhile and the
process's memory flat), connections that only open (max_connections, the
handshake and idle timeouts), the RPCs the door does not offer (they
authenticate first), and the warning that tokens cross a network in clear
text when a door listens beyond loopback without TLS.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg
import pytest
import trustme
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s

from bench.server import free_port, serve_process
from coordinator.config import Settings
from tests.grpc_door import (
    OK,
    GrpcDoor,
    code,
    grpc_door,
    message,
    metadata,
    receive_request,
    receive_status,
    resource,
    send_request,
)

TOPIC = "orders"
MIB = 1024 * 1024
MAX_BODY = MIB
MAX_REQUEST = 8 * MIB

# What a client that speaks HTTP/2 sends first: the preface, then its SETTINGS
# frame (empty: length 0, type 4, no flags, stream 0).
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS_FRAME = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
SETTINGS_TYPE = 4
GOAWAY_TYPE = 7


# --- GZIP bombs -----------------------------------------------------------


def gzip_of_zeros(mebibytes: int) -> bytes:
    """A GZIP body of `mebibytes` MiB of zeros, made without holding them (1 GiB: ~1 MB).

    After a full flush a deflate stream refers to nothing before it, so one
    MiB's block, repeated, is the deflate of every MiB.
    """
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    zeros = bytes(MIB)
    block = packer.compress(zeros) + packer.flush(zlib.Z_FULL_FLUSH)
    checksum = 0
    for _ in range(mebibytes):
        checksum = zlib.crc32(zeros, checksum)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    size = (mebibytes * MIB) & 0xFFFFFFFF
    return header + block * mebibytes + packer.flush() + struct.pack("<II", checksum, size)


def gzipped(body: bytes, **properties: Any) -> Any:
    sent = message(TOPIC, **properties)
    sent.body = body
    sent.system_properties.body_encoding = d.GZIP
    return sent


@pytest.fixture
def tokens(issue_token: Callable[..., str]) -> dict[str, str]:
    return {
        "producer": issue_token("orders", produce_topics=(TOPIC,), producer_groups=(TOPIC,)),
        "outsider": issue_token(
            "payments", produce_topics=("payments",), producer_groups=("payments",)
        ),
    }


@pytest.fixture
def door(database_url: str, tokens: dict[str, str]) -> Iterator[GrpcDoor]:
    settings = Settings(database_url=None).with_overrides(
        max_body_bytes=MAX_BODY, max_request_bytes=MAX_REQUEST
    )
    with grpc_door(database_url, settings, token=tokens["producer"]) as door:
        yield door


def stored(db: psycopg.Connection) -> int:
    row = db.execute("SELECT count(*) FROM messages").fetchone()
    assert row is not None
    return int(row[0])


class Watch:
    """/health's slowest answer and the process's largest RSS growth while a call runs.

    The LiveServer serves in this process, so its memory is this process's.
    """

    def __init__(self, door: GrpcDoor) -> None:
        self.door = door
        self.slowest = 0.0
        self.grown = 0

    def during(self, call: Callable[[], Any]) -> Any:
        process = psutil.Process()
        before = process.memory_info().rss
        with (
            httpx.Client(base_url=self.door.server.url, timeout=30) as http,
            ThreadPoolExecutor(1) as pool,
        ):
            pending: Future[Any] = pool.submit(call)
            deadline = time.monotonic() + 120
            probes = 0
            while (not pending.done() or probes == 0) and time.monotonic() < deadline:
                started = time.perf_counter()
                assert http.get("/health").status_code == 200
                self.slowest = max(self.slowest, time.perf_counter() - started)
                self.grown = max(self.grown, process.memory_info().rss - before)
                probes += 1
                time.sleep(0.01)
            return pending.result(timeout=max(1.0, deadline - time.monotonic()))


def test_a_batch_of_gzip_bombs_is_refused_while_health_stays_fast_and_memory_flat(
    door: GrpcDoor, db: psycopg.Connection
) -> None:
    # One body of 1 GiB and 999 just past max_body_bytes: ~2 MB on the wire.
    bomb = gzip_of_zeros(1024)
    just_over = gzip_of_zeros(MAX_BODY // MIB + 1)
    request = send_request(gzipped(bomb), *(gzipped(just_over) for _ in range(999)))
    watch = Watch(door)
    answer = watch.during(lambda: door.call("SendMessage", request, timeout=120))

    # Generous bounds: unpacked on the loop, /health waited seconds behind them.
    assert watch.slowest < 1.0, f"/health took {watch.slowest:.2f} s during the bombs"
    assert watch.grown < 128 * MIB, f"the process grew by {watch.grown // MIB} MiB"
    assert answer.status.code == code("MULTIPLE_RESULTS")
    assert {entry.status.code for entry in answer.entries} == {code("MESSAGE_BODY_TOO_LARGE")}
    sentences = {entry.status.message for entry in answer.entries}
    assert f"the unpacked body is larger than max_body_bytes={MAX_BODY}" in sentences
    assert any(f"max_request_bytes={MAX_REQUEST}" in sentence for sentence in sentences)
    assert stored(db) == 0


def test_bodies_that_unpack_to_the_limit_are_bounded_per_request(
    door: GrpcDoor, db: psycopg.Connection
) -> None:
    # Each body is allowed alone; 100 of them unpack into 100 MiB, past the
    # request's 8 MiB: the first 8 are stored, the others refused.
    at_limit = gzip_of_zeros(MAX_BODY // MIB)
    request = send_request(*(gzipped(at_limit) for _ in range(100)))
    watch = Watch(door)
    answer = watch.during(lambda: door.call("SendMessage", request, timeout=120))

    assert watch.grown < 128 * MIB, f"the process grew by {watch.grown // MIB} MiB"
    codes = [entry.status.code for entry in answer.entries]
    fit = MAX_REQUEST // MAX_BODY
    assert codes == [OK] * fit + [code("MESSAGE_BODY_TOO_LARGE")] * (100 - fit)
    assert answer.entries[fit].status.message == (
        f"the unpacked bodies of this request are larger than max_request_bytes={MAX_REQUEST}: "
        "send fewer or smaller messages per request"
    )
    assert stored(db) == fit


def test_a_token_that_may_not_send_is_refused_before_its_body_is_unpacked(
    door: GrpcDoor, tokens: dict[str, str], db: psycopg.Connection
) -> None:
    outsider = metadata(tokens["outsider"])
    for body in (gzip_of_zeros(1024), b"not gzip at all"):
        answer = door.call("SendMessage", send_request(gzipped(body)), metadata=outsider)
        assert answer.status.code == code("FORBIDDEN"), answer.status
        assert "may not" in answer.status.message
    anonymous = door.call("SendMessage", send_request(gzipped(gzip_of_zeros(1024))), metadata=[])
    assert anonymous.status.code == code("UNAUTHORIZED"), anonymous.status
    assert stored(db) == 0


def test_gzip_bodies_are_stored_unpacked_and_bad_ones_get_a_sentence(
    door: GrpcDoor, db: psycopg.Connection
) -> None:
    body = b"an order, packed " * 100
    packed = zlib.compress(body, wbits=16 + zlib.MAX_WBITS)
    # What RocketMQ's remoting protocol called GZIP is zlib's format: taken too.
    for sent in (packed, zlib.compress(body)):
        answer = door.send(gzipped(sent))
        assert answer.status.code == OK, answer.status
        row = db.execute(
            "SELECT body FROM messages WHERE message_id = %s", (answer.entries[0].message_id,)
        ).fetchone()
        assert row is not None and bytes(row[0]) == body

    for broken in (packed[:20], b"plain text", packed[:-8] + b"\0\0\0\0" + packed[-4:]):
        refused = door.send(gzipped(broken))
        assert refused.status.code == code("BAD_REQUEST"), refused.status
        assert refused.status.message.startswith("the GZIP body does not unpack"), refused.status
    assert stored(db) == 2


# --- The RPCs the door does not offer -------------------------------------


UNSUPPORTED = {
    "UpdateOffset": s.UpdateOffsetRequest(group=resource("billing")),
    "GetOffset": s.GetOffsetRequest(group=resource("billing")),
    "QueryOffset": s.QueryOffsetRequest(),
    "SyncLiteSubscription": s.SyncLiteSubscriptionRequest(),
}


def test_the_unsupported_rpcs_authenticate_first(door: GrpcDoor) -> None:
    for rpc, request in UNSUPPORTED.items():
        anonymous = door.call(rpc, request, metadata=[])
        assert anonymous.status.code == code("UNAUTHORIZED"), (rpc, anonymous.status)
        assert anonymous.status.message
        known = door.call(rpc, request)
        assert known.status.code == code("UNSUPPORTED"), (rpc, known.status)
    pull = s.PullMessageRequest(group=resource("billing"))
    (anonymous,) = list(door.stub.PullMessage(pull, metadata=[], timeout=10))
    assert anonymous.status.code == code("UNAUTHORIZED"), anonymous.status
    (known,) = list(door.stub.PullMessage(pull, metadata=metadata(door.token), timeout=10))
    assert known.status.code == code("UNSUPPORTED"), known.status


# --- Connections ----------------------------------------------------------


def open_http2(port: int, *, settings: bool = True) -> socket.socket:
    """A connection that sends the HTTP/2 preface (and its SETTINGS) and nothing more."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=10)
    connection.sendall(PREFACE + (SETTINGS_FRAME if settings else b""))
    return connection


def frames_until_closed(connection: socket.socket, seconds: float) -> tuple[bool, list[int]]:
    """Read for up to `seconds`: whether the server closed the connection, and the
    types of the frames it sent (the server's SETTINGS first, GOAWAY before a close)."""
    received = b""
    deadline = time.monotonic() + seconds
    closed = False
    while time.monotonic() < deadline:
        connection.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = connection.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            closed = True
            break
        if not data:
            closed = True
            break
        received += data
    kinds = []
    while len(received) >= 9:
        length = int.from_bytes(received[:3], "big")
        kinds.append(received[3])
        received = received[9 + length :]
    return closed, kinds


def test_past_max_connections_a_new_grpc_connection_is_closed(database_url: str) -> None:
    settings = Settings(database_url=None).with_overrides(max_connections=4)
    with grpc_door(database_url, settings) as door:
        held = [open_http2(door.port) for _ in range(4)]
        try:
            for connection in held:
                closed, kinds = frames_until_closed(connection, 0.5)
                assert not closed and SETTINGS_TYPE in kinds
            extra = open_http2(door.port)
            closed, kinds = frames_until_closed(extra, 10)
            extra.close()
            assert closed and SETTINGS_TYPE not in kinds

            # One leaves: a client gets in again (gRPC's own channel, from its first call).
            held.pop().close()
            deadline = time.monotonic() + 15
            while True:
                probe = open_http2(door.port)
                closed, _ = frames_until_closed(probe, 0.5)
                probe.close()
                if not closed or time.monotonic() > deadline:
                    break
            assert not closed, "no connection was let in after one closed"
        finally:
            for connection in held:
                connection.close()


def test_grpc_connections_that_only_open_are_closed_by_the_handshake_and_idle_timeouts(
    database_url: str,
) -> None:
    settings = Settings(database_url=None).with_overrides(
        grpc_handshake_timeout_seconds=1.0, grpc_idle_timeout_seconds=1.0
    )
    with grpc_door(database_url, settings) as door:
        preface_only = open_http2(door.port, settings=False)
        idle = open_http2(door.port)
        try:
            # Bounded generously: closed after about a second each.
            closed, _ = frames_until_closed(preface_only, 15)
            assert closed, "a connection that sent only the preface stayed open"
            closed, kinds = frames_until_closed(idle, 15)
            assert closed and kinds[-1] == GOAWAY_TYPE, kinds
        finally:
            preface_only.close()
            idle.close()
        # A call in progress is not idle: a receive waiting 3 s answers.
        answer = door.receive(receive_request("billing", TOPIC, wait=3.0), timeout=30)
        assert receive_status(answer).code == code("MESSAGE_NOT_FOUND")


# --- Plain text beyond loopback -------------------------------------------


@pytest.mark.slow
@pytest.mark.usefixtures("own_home")
def test_serving_tokens_beyond_loopback_without_tls_warns_and_with_tls_does_not(
    tmp_path: Path, database_url: str, issue_token: Callable[..., str]
) -> None:
    issue_token("metrics", metrics=True)
    grpc_port = free_port()
    # Bound to every address, but the test's traffic stays on loopback.
    with serve_process(
        cwd=tmp_path,
        global_args=["--database-url", database_url],
        serve_args=["--host", "0.0.0.0", "--grpc-port", str(grpc_port)],
    ) as server:
        assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
    output = server.process.stdout.read().decode() if server.process.stdout else ""
    port = server.url.rsplit(":", 1)[1]
    assert (
        f"warning: tokens cross the network in clear text: HTTP on 0.0.0.0:{port} and the "
        f"RocketMQ gRPC door on 0.0.0.0:{grpc_port} are not encrypted"
    ) in output, output

    authority = trustme.CA()
    issued = authority.issue_cert("127.0.0.1")
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    issued.private_key_pem.write_to_path(str(key))
    issued.cert_chain_pems[0].write_to_path(str(cert))
    trusted = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    authority.configure_trust(trusted)
    with serve_process(
        cwd=tmp_path,
        global_args=["--database-url", database_url],
        serve_args=[
            "--host",
            "0.0.0.0",
            "--grpc-port",
            str(free_port()),
            "--tls-cert",
            str(cert),
            "--tls-key",
            str(key),
        ],
        tls=trusted,
    ) as server:
        assert httpx.get(f"{server.url}/health", verify=trusted, timeout=10).status_code == 200
    output = server.process.stdout.read().decode() if server.process.stdout else ""
    assert "authentication is on (1 token)" in output
    assert "clear text" not in output, output
