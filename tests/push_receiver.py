"""A push producer's check URL for tests: a real HTTP server in a thread.

It records every check request it receives (raw body and headers) and
answers with whatever the test's `answer` function returns. `SilentCheckUrl`
is one that never answers.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from coordinator.core.checkback.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify

# status code and JSON body (None: an empty body)
Answer = tuple[int, dict[str, Any] | None]


@dataclass(frozen=True)
class Received:
    body: bytes
    headers: dict[str, str]
    at: float = field(default_factory=time.monotonic)  # when it arrived

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.body)

    @property
    def signature(self) -> str | None:
        return self.headers.get(SIGNATURE_HEADER.lower())

    @property
    def timestamp(self) -> str | None:
        return self.headers.get(TIMESTAMP_HEADER.lower())

    def signed_with(self, secret: str) -> bool:
        """Verified as a producer does: over the timestamp header and the raw body."""
        return verify(self.body, secret, self.signature, self.timestamp)


class PushReceiver:
    def __init__(self, answer: Callable[[Received], Answer] | None = None) -> None:
        self.answer = answer or (lambda _: (200, None))
        self.received: list[Received] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                request = Received(
                    body=self.rfile.read(length),
                    headers={k.lower(): v for k, v in self.headers.items()},
                )
                with receiver._lock:
                    receiver.received.append(request)
                status, body = receiver.answer(request)
                content = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def log_message(self, *args: object) -> None:  # keep test output quiet
                pass

        class Server(ThreadingHTTPServer):
            # Several nodes push at once (up to max_inflight_dispatches each):
            # the default listen backlog of 5 drops connections under load.
            request_queue_size = 256
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                # An answer to a node that is gone (killed on purpose, or
                # timed out) fails to write: expected, not worth a traceback.
                if not isinstance(sys.exc_info()[1], ConnectionError):
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/check"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> PushReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def offsets(self) -> list[int]:
        with self._lock:
            return [r.json["offset"] for r in self.received]

    def wait_for(self, count: int, timeout: float = 20.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.05)
        raise AssertionError(f"expected {count} pushed check requests, got {len(self.received)}")


class SilentCheckUrl:
    """A check URL that accepts connections and never answers: a producer that hangs.

    Stopping it closes the connections it holds, so a push still waiting
    fails at once instead of at its timeout.
    """

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/check"
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> SilentCheckUrl:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
        self._listener.close()
        with self._lock:
            for conn in self._held:
                conn.close()

    @property
    def connections(self) -> int:
        """How many pushes reached it (each on a connection of its own)."""
        with self._lock:
            return len(self._held)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            with self._lock:
                self._held.append(conn)
