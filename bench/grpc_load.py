"""Producers over the RocketMQ 5 gRPC door: one transactional message per call.

    python -m bench.grpc_load --concurrency 16 --seconds 10            # one run, CPU split
    python -m bench.grpc_load --concurrency 16 --py-spy grpc.svg       # and a profile
    python -m bench.grpc_load --concurrency 16 --floor                 # grpc.aio alone

Each producer does what an official RocketMQ 5 client does for one
transactional message: SendMessage with one TRANSACTION message, then
EndTransaction COMMIT with the transaction id the send returned. Success is
the RocketMQ status in each response (Code.OK), as the clients read it.

The calls go through `MessagingServiceStub` on `grpc.aio` channels in this
process, the same one that drives the HTTP load (not the server's): each
producer is a coroutine, one call in flight at a time.

Connections: by default every producer has a channel (so a TCP connection)
of its own, like the HTTP load's one keep-alive connection per producer and
like producers in separate processes. Channels to the same address would
otherwise share one connection through grpc's global subchannel pool, hence
`grpc.use_local_subchannel_pool`. With `channels=1` every producer's calls
are HTTP/2 streams multiplexed on one connection, as the threads of one
client process share its channel.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import httpx
import uvloop

from bench.cpu import CpuMeter, per_message, postmaster_pid
from bench.database import bench_database
from bench.http_load import CONSUMER_GROUP, LoadResult
from bench.server import coordinator_process, free_port

# A topic of its own, so that what the gRPC rows committed can be counted.
TOPIC = "bench-grpc"
BODY = b"order 1001 created"
CALL_TIMEOUT_SECONDS = 30.0


def _protocol() -> tuple[Any, Any, Any]:
    # Imported on use: importing the client package creates ~/logs/rocketmq_python.
    from rocketmq.grpc_protocol import (  # type: ignore[import-untyped]
        definition_pb2,
        service_pb2,
        service_pb2_grpc,
    )

    return definition_pb2, service_pb2, service_pb2_grpc


def subscribe(http_url: str) -> None:
    """Subscribe the benchmark's consumer group to TOPIC, so each commit makes a delivery
    (as the HTTP rows' and the baseline's commits do). Nobody consumes."""
    answer = httpx.put(
        f"{http_url}/v1/consumer-groups/{CONSUMER_GROUP}/subscriptions/{TOPIC}",
        json={"expression": "*"},
        timeout=10,
    )
    answer.raise_for_status()


class _Producer:
    """One producer: its stub, its client id, and requests built the way the clients build them."""

    def __init__(self, stub: Any, run_id: str, number: int) -> None:
        self.definition, self.service, _ = _protocol()
        self.stub = stub
        self.metadata = (("x-mq-client-id", f"bench-{run_id}-{number}"),)
        self.prefix = f"BENCH-{run_id}-{number}-"
        self.numbers = itertools.count()
        self.ok = self.definition.Code.Value("OK")
        self.topic = self.definition.Resource(name=TOPIC)

    async def one_message(self) -> None:
        definition, service = self.definition, self.service
        message_id = f"{self.prefix}{next(self.numbers)}"
        sent = await self.stub.SendMessage(
            service.SendMessageRequest(
                messages=[
                    definition.Message(
                        topic=self.topic,
                        system_properties=definition.SystemProperties(
                            message_id=message_id,
                            message_type=definition.TRANSACTION,
                            body_encoding=definition.IDENTITY,
                        ),
                        body=BODY,
                    )
                ]
            ),
            metadata=self.metadata,
            timeout=CALL_TIMEOUT_SECONDS,
        )
        if sent.status.code != self.ok or not sent.entries[0].transaction_id:
            raise RuntimeError(f"SendMessage: {sent.status.code} {sent.status.message}")
        ended = await self.stub.EndTransaction(
            service.EndTransactionRequest(
                topic=self.topic,
                message_id=message_id,
                transaction_id=sent.entries[0].transaction_id,
                resolution=definition.COMMIT,
                source=definition.SOURCE_CLIENT,
            ),
            metadata=self.metadata,
            timeout=CALL_TIMEOUT_SECONDS,
        )
        if ended.status.code != self.ok:
            raise RuntimeError(f"EndTransaction: {ended.status.code} {ended.status.message}")

    async def run(self, stop_at: float, result: LoadResult) -> None:
        while time.perf_counter() < stop_at:
            start = time.perf_counter()
            await self.one_message()
            result.latencies_ms.append((time.perf_counter() - start) * 1000)
            result.messages += 1


def _channel(endpoint: str) -> grpc.aio.Channel:
    # A local subchannel pool: a connection of this channel's own (see the module's doc).
    return grpc.aio.insecure_channel(endpoint, options=[("grpc.use_local_subchannel_pool", 1)])


async def _run(endpoint: str, concurrency: int, seconds: float, channels: int) -> LoadResult:
    _, _, service_grpc = _protocol()
    opened = [_channel(endpoint) for _ in range(max(1, min(channels, concurrency)))]
    try:
        stubs = [service_grpc.MessagingServiceStub(channel) for channel in opened]
        run_id = uuid.uuid4().hex[:8]
        producers = [_Producer(stubs[n % len(stubs)], run_id, n) for n in range(concurrency)]
        # Every connection up, and the server's paths warm, before the clock starts.
        await asyncio.gather(*(p.one_message() for p in producers))
        await producers[0].run(time.perf_counter() + 0.5, LoadResult())
        result = LoadResult()
        start = time.perf_counter()
        stop_at = start + seconds
        await asyncio.gather(*(p.run(stop_at, result) for p in producers))
        result.seconds = time.perf_counter() - start
    finally:
        for channel in opened:
            await channel.close()
    return result


def run_grpc_single(
    endpoint: str, *, concurrency: int, seconds: float, channels: int | None = None
) -> LoadResult:
    """`concurrency` producers for `seconds` on `channels` connections (default: one each)."""
    return uvloop.run(_run(endpoint, concurrency, seconds, channels or concurrency))


def main(argv: list[str] | None = None) -> None:
    """One gRPC run on a fresh server, with the CPU split and optionally a py-spy profile."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--database-url", help="measure this server (default: embedded)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--channels", type=int, help="connections (default: one per producer)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        type=_setting,
        metavar="NAME=VALUE",
        help="a setting of the server under test, e.g. group_commit_linger_seconds=0 (repeatable)",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="measure grpc.aio answering constants, no coordinator (bench/grpc_floor.py)",
    )
    parser.add_argument(
        "--py-spy",
        type=Path,
        metavar="FILE",
        help="profile the server with py-spy during the run (.svg: a flame graph, "
        ".txt: raw stacks); it pauses the server at each sample, so the figures drop",
    )
    parser.add_argument(
        "--native",
        action="store_true",
        help="with --py-spy: C frames too (grpc core, protobuf, uvloop), at a higher cost",
    )
    args = parser.parse_args(argv)
    with _server_under_test(args) as (pid, endpoint, meter):
        print(f"server pid {pid}, gRPC on {endpoint}", flush=True)
        profiler = _py_spy(pid, args.py_spy, args.seconds, args.native)
        before = meter.snapshot()
        result = run_grpc_single(
            endpoint, concurrency=args.concurrency, seconds=args.seconds, channels=args.channels
        )
        after = meter.snapshot()
        if profiler is not None:
            profiler.wait(timeout=args.seconds + 30)
    print(
        f"{args.concurrency} producers: {result.messages_per_second:,.0f} msgs/s, "
        f"p50 {result.percentile(50):.1f} ms, p99 {result.percentile(99):.1f} ms"
    )
    print(f"CPU per message: {per_message(before, after, result.messages)}")


def _setting(text: str) -> tuple[str, str]:
    """`NAME=VALUE`: the server gets COORDINATOR_NAME=VALUE."""
    name, equals, value = text.partition("=")
    if not equals or not name.strip():
        raise argparse.ArgumentTypeError(f"give NAME=VALUE, e.g. access_log=false (got {text!r})")
    return name.strip(), value


@contextmanager
def _server_under_test(args: argparse.Namespace) -> Iterator[tuple[int, str, CpuMeter]]:
    if args.floor:
        from bench.grpc_floor import floor_server

        with floor_server() as (pid, endpoint):
            yield pid, endpoint, CpuMeter(pid, None)
        return
    with bench_database(args.database_url) as database:
        port = free_port()
        settings = dict(args.set)
        with coordinator_process(database.url, grpc_port=port, **settings) as server:
            subscribe(server.url)
            meter = CpuMeter(server.process.pid, postmaster_pid(database.url), database.url)
            yield server.process.pid, f"127.0.0.1:{port}", meter


def _py_spy(
    pid: int, out: Path | None, seconds: float, native: bool
) -> subprocess.Popen[bytes] | None:
    if out is None:
        return None
    # Started with the run, stopped a little before it ends: only loaded samples.
    return subprocess.Popen(
        [
            str(Path(sys.executable).with_name("py-spy")),
            "record",
            "--pid", str(pid),
            "--duration", str(max(1, int(seconds) - 2)),
            "--rate", "100",
            "--format", "raw" if out.suffix == ".txt" else "flamegraph",
            "--output", str(out),
            *(["--native"] if native else []),
        ],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip


if __name__ == "__main__":
    main()
