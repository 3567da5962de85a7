"""Draining committed messages: the official Python PushConsumer next to a SimpleConsumer over HTTP.

Two consumer groups subscribe to one topic; a backlog of committed
transactional messages is made through the HTTP batch API (so each group has
every message to consume); then each group drains it:

- over HTTP, one connection receiving 32 at a time and acking them in one
  batch (what a SimpleConsumer of the SDK does);
- with `rocketmq-python-client`'s PushConsumer on the gRPC door, in a
  process of its own (the client keeps threads and writes its log under
  $HOME), its listener returning SUCCESS at once.

Each figure is messages over the time from the first message to the last
(start-up excluded).

    python -m bench.push_consumer --messages 2000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import uvloop

from bench.http_load import LoadResult, connect
from bench.server import coordinator_process, free_port

TOPIC = "bench-push"
PRODUCER_GROUP = "bench-push-producers"
HTTP_GROUP = "bench-push-http"
PUSH_GROUP = "bench-push-grpc"
FILL_BATCH = 100
RECEIVE_BATCH = 32
CHILD_SECONDS = 300.0  # bound on the PushConsumer's process


def _json(body: dict) -> bytes:
    return json.dumps(body).encode()


async def _fill(url: str, messages: int) -> None:
    """Subscribe both groups, then commit `messages` transactional messages."""
    connection = await connect(url)
    for group in (HTTP_GROUP, PUSH_GROUP):
        path = f"/v1/consumer-groups/{group}/subscriptions/{TOPIC}"
        await connection.request("PUT", path, _json({"expression": "*"}))
    left = messages
    while left > 0:
        size = min(FILL_BATCH, left)
        half = {"topic": TOPIC, "producer_group": PRODUCER_GROUP, "body_text": "push bench"}
        halves = await connection.post("/v1/transactions/batch", _json({"messages": [half] * size}))
        requests = [
            {"transaction_id": r["transaction_id"], "producer_group": PRODUCER_GROUP,
             "resolution": "commit"}
            for r in halves["results"]
        ]  # fmt: skip
        await connection.post("/v1/transactions/end-batch", _json({"requests": requests}))
        left -= size


async def _drain_http(url: str, messages: int) -> LoadResult:
    connection = await connect(url)
    receive = _json({"max_messages": RECEIVE_BATCH, "wait_seconds": 2, "invisible_seconds": 60})
    result = LoadResult()
    first = None
    while result.messages < messages:
        start = time.perf_counter()
        answer = await connection.post(f"/v1/consumer-groups/{HTTP_GROUP}/receive", receive)
        handles = [m["receipt_handle"] for m in answer["messages"]]
        if not handles:
            continue
        first = first if first is not None else start
        await connection.post(
            f"/v1/consumer-groups/{HTTP_GROUP}/ack/batch", _json({"receipt_handles": handles})
        )
        result.latencies_ms.append((time.perf_counter() - start) * 1000)
        result.messages += len(handles)
    result.seconds = time.perf_counter() - (first or time.perf_counter())
    return result


def _drain_push(endpoint: str, messages: int) -> LoadResult:
    """The PushConsumer's process drains the backlog; it reports its own timing."""
    with tempfile.TemporaryDirectory(prefix="bench-push-") as home:
        environment = {**os.environ, "HOME": home}
        child = subprocess.run(
            [sys.executable, "-m", "bench.push_consumer", "child", endpoint, str(messages)],
            cwd=Path(__file__).resolve().parents[1],
            env=environment,
            capture_output=True,
            text=True,
            timeout=CHILD_SECONDS,
            check=False,
        )
    if child.returncode != 0:
        raise RuntimeError(f"the PushConsumer's process failed:\n{child.stdout}{child.stderr}")
    figures = json.loads(child.stdout.strip().splitlines()[-1])
    return LoadResult(messages=figures["messages"], seconds=figures["seconds"])


def _child(endpoint: str, messages: int) -> int:
    from rocketmq import (
        ClientConfiguration,
        ConsumeResult,
        Credentials,
        FilterExpression,
        MessageListener,
        PushConsumer,
    )

    lock = threading.Lock()
    seen: list[float] = []
    done = threading.Event()

    class Listener(MessageListener):
        def consume(self, message: object) -> ConsumeResult:
            with lock:
                seen.append(time.perf_counter())
                if len(seen) >= messages:
                    done.set()
            return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        ClientConfiguration(endpoint, Credentials()),
        PUSH_GROUP,
        Listener(),
        {TOPIC: FilterExpression("*")},
    )
    consumer.startup()
    try:
        finished = done.wait(CHILD_SECONDS - 30)
    finally:
        consumer.shutdown()
    with lock:
        seconds = seen[-1] - seen[0] if len(seen) > 1 else 0.0
        print(json.dumps({"messages": len(seen), "seconds": seconds}))
    return 0 if finished else 1


def run_push_consumer(database_url: str, messages: int) -> dict[str, LoadResult]:
    """Both drains of a backlog of `messages`, on one server with its gRPC door."""
    port = free_port()
    with coordinator_process(database_url, grpc_port=port) as server:
        uvloop.run(_fill(server.url, messages))
        http = uvloop.run(_drain_http(server.url, messages))
        push = _drain_push(f"127.0.0.1:{port}", messages)
    return {"http_simple_consumer": http, "grpc_push_consumer": push}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["child"]:
        return _child(argv[1], int(argv[2]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="measure this server (default: embedded)")
    parser.add_argument("--messages", type=int, default=2000)
    args = parser.parse_args(argv)
    from bench.database import bench_database

    with bench_database(args.database_url) as database:
        results = run_push_consumer(database.url, args.messages)
    for name, result in results.items():
        print(f"{name}: {result.messages} messages, {result.messages_per_second:,.0f} msgs/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
