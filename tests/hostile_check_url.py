"""A check URL that answers what no producer should: a real HTTP server in a thread.

Each path is an answer: `/ok` a commit, `/declared` a huge body with its
Content-Length, `/undeclared` a huge body without one (it ends when the
connection closes), `/gzip` a small gzip that inflates to a huge body,
`/trickle` a byte every 0.2 s (until it is stopped, at most a minute). The
huge bodies are written chunk by chunk and the bomb is compressed as it is
made, so none of them is ever whole in this process's memory.
"""

from __future__ import annotations

import functools
import json
import sys
import threading
import zlib
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MIB = 1024 * 1024
HUGE_BYTES = 128 * MIB
BOMB_INFLATED_BYTES = 60 * MIB  # about 61 KB of gzip: under a 64 KiB bound as sent
_CHUNK = bytes(MIB // 16)


@functools.cache
def gzip_bomb() -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [compressor.compress(bytes(MIB)) for _ in range(BOMB_INFLATED_BYTES // MIB)]
    return b"".join(parts) + compressor.flush()


class HostileCheckUrl:
    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()  # pushes received, by path
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            # HTTP/1.0: a body without Content-Length ends when the connection closes
            protocol_version = "HTTP/1.0"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                with hostile._lock:
                    hostile.requests[self.path] += 1
                if self.path == "/ok":
                    self._answer(json.dumps({"resolution": "commit"}).encode())
                elif self.path == "/declared":
                    self._huge(declared=True)
                elif self.path == "/undeclared":
                    self._huge(declared=False)
                elif self.path == "/gzip":
                    self._answer(gzip_bomb(), {"content-encoding": "gzip"})
                elif self.path == "/trickle":
                    self._trickle()
                else:
                    self.send_error(404)

            def _answer(self, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def _huge(self, *, declared: bool) -> None:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                if declared:
                    self.send_header("content-length", str(HUGE_BYTES))
                self.end_headers()
                for _ in range(HUGE_BYTES // len(_CHUNK)):
                    self.wfile.write(_CHUNK)  # stops at the reader's close: ConnectionError

            def _trickle(self) -> None:
                self.send_response(200)
                self.end_headers()
                for _ in range(300):
                    if hostile._stopped.wait(0.2):
                        return
                    self.wfile.write(b" ")
                    self.wfile.flush()

            def log_message(self, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                # The coordinator hanging up on a huge answer is what the test wants.
                if not isinstance(sys.exc_info()[1], ConnectionError):
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> HostileCheckUrl:
        gzip_bomb()  # made before any push waits for it
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        self.server.shutdown()
        self.server.server_close()

    def received(self, path: str) -> int:
        with self._lock:
            return self.requests[path]
