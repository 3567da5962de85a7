"""The gRPC door's own CPU per message, in one process, without gRPC or a database.

    python -m bench.grpc_door_cpu                     # 20,000 messages, a table
    python -m bench.grpc_door_cpu --json              # the figures for scripts
    python -m bench.grpc_door_cpu --profile door.prof # and a cProfile of the run

Each message is what `bench.grpc_load` sends: a SendMessage request with one
TRANSACTION message, then EndTransaction COMMIT. Both go through the
handlers as the server registers them (`coordinator.grpc.server.handlers`:
the request parsed from its bytes, metered, logged, answered, the answer
serialised), but the core answers with constants at once. What the process
spends per message is then the door's part alone: authentication, reading
and checking the message, statuses and responses, metrics and the access
log. On a shared machine this drifts far less than a load over sockets,
because nothing else runs in between.

The run is made twice in alternating rounds, with the access log on (the
default, written to a file as in production) and off, so the table shows
what the access lines cost.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import uvloop
from rich.console import Console
from rich.table import Table

from coordinator import logs
from coordinator.config import Settings
from coordinator.core.auth import Authenticator
from coordinator.core.configs import ServiceConfigs
from coordinator.core.context import CoreContext
from coordinator.domain.messages import EndRequest, EndResult, NewMessage, SendResult
from coordinator.domain.states import MessageState
from coordinator.metrics import Meter

console = Console()
BODY = b"order 1001 created"


class ConstantTransactions:
    """The core's transactions, answering at once without a database."""

    async def prepare(self, message: NewMessage) -> SendResult:
        return SendResult(
            offset=1,
            message_id=message.message_id or "",
            transaction_id="0" * 32,
            state=MessageState.PREPARED,
            created=True,
            recall_handle=None,
        )

    async def end(self, request: EndRequest) -> EndResult:
        return EndResult(
            offset=1,
            message_id=request.message_id or "",
            transaction_id=request.transaction_id,
            state=MessageState.COMMITTED,
            changed=True,
        )


@dataclass
class _Core:
    transactions: ConstantTransactions


class _Context:
    """What a handler reads of a call: the metadata an official client sends."""

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return (
            ("x-mq-client-id", "bench-door-cpu"),
            ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "v2"),
        )


class Door:
    """SendMessage and EndTransaction as the server calls them, bytes in, bytes out."""

    def __init__(self) -> None:
        from coordinator.grpc.server import SERVICE_NAME, handlers
        from coordinator.grpc.service import MessagingService
        from coordinator.grpc.stubs import load

        self.stubs = load()
        configs = ServiceConfigs.from_settings(Settings())
        authenticator = Authenticator(CoreContext(None), configs.auth)  # type: ignore[arg-type]
        core: Any = _Core(ConstantTransactions())
        service = MessagingService(core, authenticator, configs.grpc, self.stubs, port=8081)
        # What grpc.aio looks up for a call: the RPC's handler, parser and serialiser.
        registered = handlers(service, self.stubs, Meter().grpc)
        self.send = registered.service(_Call(f"/{SERVICE_NAME}/SendMessage"))
        self.end = registered.service(_Call(f"/{SERVICE_NAME}/EndTransaction"))
        self.context = _Context()
        self.ok = self.stubs.code("OK")

    async def one_message(self, number: int) -> None:
        definition, service = self.stubs.definition, self.stubs.service
        topic = definition.Resource(name="bench-grpc")
        message_id = f"BENCH-DOOR-{number}"
        send = service.SendMessageRequest(
            messages=[
                definition.Message(
                    topic=topic,
                    system_properties=definition.SystemProperties(
                        message_id=message_id,
                        message_type=definition.TRANSACTION,
                        body_encoding=definition.IDENTITY,
                    ),
                    body=BODY,
                )
            ]
        ).SerializeToString()
        sent = await self._call(self.send, send)
        if sent.status.code != self.ok:
            raise RuntimeError(f"SendMessage: {sent.status.message}")
        end = service.EndTransactionRequest(
            topic=topic,
            message_id=message_id,
            transaction_id=sent.entries[0].transaction_id,
            resolution=definition.COMMIT,
            source=definition.SOURCE_CLIENT,
        ).SerializeToString()
        ended = await self._call(self.end, end)
        if ended.status.code != self.ok:
            raise RuntimeError(f"EndTransaction: {ended.status.message}")

    async def _call(self, rpc: Any, request: bytes) -> Any:
        answer = await rpc.unary_unary(rpc.request_deserializer(request), self.context)
        rpc.response_serializer(answer)
        return answer


@dataclass(frozen=True)
class _Call:
    """The part of grpc's HandlerCallDetails a generic handler reads."""

    method: str


def _cpu_per_message(door: Door, messages: int) -> float:
    """Microseconds of this process's CPU per message (building the requests included:
    the same in every variant)."""

    async def run() -> None:
        for number in range(messages):
            await door.one_message(number)
        logs.flush_access_lines()  # what waits to be written is part of the cost

    started = time.process_time()
    uvloop.run(run())
    return (time.process_time() - started) / messages * 1e6


def measure(messages: int, rounds: int, profile: str | None = None) -> dict[str, Any]:
    door = Door()
    spent: dict[str, list[float]] = {"access log on": [], "access log off": []}
    logged = dict.fromkeys(spent, 0)  # bytes of access lines each variant wrote
    with tempfile.TemporaryFile(mode="w") as log_file:
        saved = sys.stderr
        sys.stderr = log_file  # the access log's handler writes to the current stderr
        try:
            _cpu_per_message(door, min(messages, 1000))  # warm up
            for number in range(rounds):
                order = list(spent) if number % 2 == 0 else list(reversed(spent))
                for variant in order:
                    logs.ACCESS.setLevel(
                        logging.INFO if variant == "access log on" else logging.WARNING
                    )
                    before = log_file.tell()
                    spent[variant].append(_cpu_per_message(door, messages))
                    log_file.flush()
                    logged[variant] += log_file.tell() - before
            if profile:
                logs.ACCESS.setLevel(logging.INFO)
                profiler = cProfile.Profile()
                profiler.runcall(_cpu_per_message, door, messages)
                profiler.dump_stats(profile)
        finally:
            sys.stderr = saved
    on = statistics.median(spent["access log on"])
    off = statistics.median(spent["access log off"])
    return {
        "messages": messages,
        "rounds": rounds,
        "door_us_per_message": {
            variant: round(statistics.median(v), 1) for variant, v in spent.items()
        },
        "all_rounds_us": {variant: [round(x, 1) for x in v] for variant, v in spent.items()},
        "access_log_us_per_message": round(on - off, 1),
        "access_log_bytes_per_message": {
            variant: round(written / (messages * rounds), 1) for variant, written in logged.items()
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", help="write a cProfile of one more run (access log on)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.messages < 1 or args.rounds < 1:
        parser.error("--messages and --rounds take a positive number")
    logs.configure(log_format="json")
    report = measure(args.messages, args.rounds, args.profile)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    table = Table(
        title=f"The gRPC door's own CPU per message ({args.messages:,} messages, "
        f"median of {args.rounds} rounds)"
    )
    table.add_column("variant")
    table.add_column("µs per message", justify="right")
    for variant, value in report["door_us_per_message"].items():
        table.add_row(variant, f"{value:,.1f}")
    table.add_row("the access log's two lines", f"{report['access_log_us_per_message']:,.1f}")
    console.print(table)


if __name__ == "__main__":
    main()
