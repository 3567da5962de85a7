"""The gRPC door loads RocketMQ's protocol modules without the client around them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, os, sys
from coordinator.grpc.stubs import load
stubs = load()
loaded_alone = {
    "client_imported": "rocketmq" in sys.modules,
    "opentelemetry": any(name.startswith("opentelemetry") for name in sys.modules),
    "home": sorted(os.listdir(os.environ["HOME"])),
    "ok": stubs.code("OK"),
}
from rocketmq import Producer  # a client in the same process still works
from rocketmq.grpc_protocol import definition_pb2
loaded_alone["same_modules"] = definition_pb2 is stubs.definition
print(json.dumps(loaded_alone))
"""


def test_the_door_loads_the_protocol_without_the_client_or_its_log_directory(
    tmp_path: Path,
) -> None:
    environment = {**os.environ, "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=environment, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {
        "client_imported": False,
        "opentelemetry": False,
        "home": [],
        "ok": 20000,
        "same_modules": True,
    }
