"""Coordinator nodes: `coordinator --database-url URL serve` processes on fixed ports.

A node keeps its port across restarts, so clients pointed at it reconnect
by themselves. --database-url is always given: a SIGKILLed node started
without one would leave its embedded PostgreSQL running.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import httpx

from bench.server import free_port
from bench.soak import children


class Node:
    def __init__(
        self, index: int, database_url: str, settings: Mapping[str, str], log: Path
    ) -> None:
        self.index = index
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.database_url = database_url
        self.log = log
        # Only the soak's settings: none inherited from the caller's environment.
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
        self.env.update({f"COORDINATOR_{name.upper()}": value for name, value in settings.items()})
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        self.process = children.spawn(
            [
                sys.executable,
                "-m",
                "coordinator",
                "--database-url",
                self.database_url,
                "serve",
                "--port",
                str(self.port),
            ],
            log=self.log,
            env=self.env,
        )

    def kill(self) -> None:
        if self.process is not None:
            children.kill(self.process)

    def stop(self) -> None:
        if self.process is not None:
            children.stop(self.process, grace_seconds=20)

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False
