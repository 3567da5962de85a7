"""The floor of the gRPC door: grpc.aio serving MessagingService with constant answers.

    python -m bench.grpc_load --floor --concurrency 16      # the gRPC load against it

No coordinator, no database: SendMessage answers OK with a made-up
transaction id, EndTransaction answers OK. The RPCs are registered the way
the door registers them (`coordinator.grpc.server.handlers`), on the same
event loop (uvloop), so what this server spends per message is what grpc.aio
and protobuf cost the door before its own code runs: the least a gRPC
message can cost this machine's server in Python.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import uvloop

from bench.server import free_port


class ConstantService:
    def __init__(self) -> None:
        from coordinator.grpc.stubs import load

        self.stubs = load()
        self.ok = self.stubs.definition.Status(code=self.stubs.code("OK"), message="OK")

    async def SendMessage(self, request: Any, context: Any) -> Any:
        service = self.stubs.service
        entries = [
            service.SendResultEntry(
                status=self.ok,
                message_id=message.system_properties.message_id,
                transaction_id="0" * 32,
                offset=1,
            )
            for message in request.messages
        ]
        return service.SendMessageResponse(status=self.ok, entries=entries)

    async def EndTransaction(self, request: Any, context: Any) -> Any:
        return self.stubs.service.EndTransactionResponse(status=self.ok)

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        # The registration asks for every RPC of the service; the load calls only two.
        async def unused(request: Any, context: Any) -> Any:
            raise NotImplementedError(name)

        return unused


async def serve(port: int) -> None:
    from coordinator.grpc.server import handlers
    from coordinator.metrics import Meter

    service = ConstantService()
    server = grpc.aio.server()
    registered = handlers(service, service.stubs, Meter().grpc)  # type: ignore[arg-type]
    server.add_generic_rpc_handlers((registered,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(0)


@contextmanager
def floor_server(startup_seconds: float = 30.0) -> Iterator[tuple[int, str]]:
    """The constant server in a process of its own; yields (its pid, its endpoint)."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "bench.grpc_floor", str(port)])
    try:
        deadline = time.monotonic() + startup_seconds
        while True:
            if process.poll() is not None:
                raise RuntimeError("the constant gRPC server exited")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the constant gRPC server did not listen") from None
                time.sleep(0.1)
        yield process.pid, f"127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1])))
