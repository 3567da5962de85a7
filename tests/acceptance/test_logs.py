"""What `coordinator serve` logs, read from its output as an operator's log collector would.

Each test runs a real server process with its output in a file (not a
terminal, so its log lines are JSON), makes requests, and reads the lines.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol import service_pb2_grpc

from bench.server import free_port
from tests.grpc_door import metadata
from tests.processes import ServeProcess, coordinator_serve

pytestmark = pytest.mark.slow

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
# What Python's logging writes in its own default formats: none of it may appear.
PLAIN_LOG_LINE = re.compile(r"^(\S+ \S+ )?(DEBUG|INFO|WARNING|ERROR|CRITICAL)[ :]")
CHECKS = {
    "check_scan_interval_seconds": 0.1,
    "transaction_timeout_seconds": 0.2,
    "check_interval_seconds": 0.2,
    "check_max": 1,
}


def _log_lines(server: ServeProcess) -> list[dict[str, Any]]:
    """The JSON log lines so far; any other line must be one of serve's start-up lines."""
    lines = []
    for line in server.output().splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))  # a line that is not whole JSON fails here
        else:
            assert not PLAIN_LOG_LINE.match(line), line
    return lines


def _access(server: ServeProcess) -> list[dict[str, Any]]:
    return [
        line
        for line in _log_lines(server)
        if line["logger"] == "coordinator.access" and line.get("path") != "/health"
    ]


def _wait_for(server: ServeProcess, found: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + 30
    while not (result := found()):
        assert time.monotonic() < deadline, f"no {what} in:\n{server.output()[-3000:]}"
        time.sleep(0.1)
    return result


def _prepare(http: httpx.Client, group: str = "shop") -> dict[str, Any]:
    response = http.post(
        "/v1/transactions", json={"topic": "orders", "producer_group": group, "body_text": "o"}
    )
    assert response.status_code == 201, response.text
    return response.json()


def test_serve_logs_one_json_access_line_per_request_and_per_grpc_call(
    database_url: str, tmp_path: Path
) -> None:
    grpc_port = free_port()
    with (
        coordinator_serve(database_url, tmp_path, grpc_port=grpc_port) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        sent = _prepare(http)
        tid = sent["transaction_id"]
        end = f"/v1/transactions/{tid}/end"
        assert http.post(end, json={"producer_group": "shop", "resolution": "commit"}).is_success
        assert http.get(f"/v1/transactions/{tid}", params={"view": "x"}).status_code == 200
        assert http.get("/v1/no-such-route").status_code == 404
        assert http.post("/v1/transactions", json={"topic": "orders"}).status_code == 422
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            route = stub.QueryRoute(
                s.QueryRouteRequest(topic=d.Resource(name="orders")),
                metadata=metadata(),
                timeout=10,
            )
            assert route.status.code == d.Code.Value("OK")
        lines = _wait_for(server, lambda: len(_access(server)) >= 6 and _access(server), "lines")
        time.sleep(0.5)  # nothing more comes
        assert _access(server) == lines

    http_lines = [line for line in lines if "method" in line]
    assert [(line["method"], line["path"], line["status"]) for line in http_lines] == [
        ("POST", "/v1/transactions", 201),
        ("POST", end, 200),
        ("GET", f"/v1/transactions/{tid}?view=x", 200),
        ("GET", "/v1/no-such-route", 404),
        ("POST", "/v1/transactions", 422),
    ]
    assert [line["route"] for line in http_lines] == [
        "/v1/transactions",
        "/v1/transactions/{transaction_id}/end",
        "/v1/transactions/{transaction_id}",
        "(unmatched)",
        "/v1/transactions",
    ]
    (grpc_line,) = [line for line in lines if "rpc" in line]
    assert (grpc_line["rpc"], grpc_line["code"]) == ("QueryRoute", "OK")
    for line in lines:
        assert TIME.match(line["time"]), line
        assert line["level"] == "INFO"
        assert isinstance(line["duration_ms"], float) and line["duration_ms"] >= 0
        assert f"{line['duration_ms']:.1f} ms" in line["message"]
    for line in http_lines:
        assert line["client"] == "127.0.0.1"
        assert line["message"].startswith(f"{line['method']} {line['path']} {line['status']} ")


def test_the_access_log_can_be_turned_off(database_url: str, tmp_path: Path) -> None:
    with (
        coordinator_serve(database_url, tmp_path, access_log=False) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        _prepare(http)
        assert http.get("/v1/no-such-route").status_code == 404
        time.sleep(0.5)
        assert [line for line in _log_lines(server) if line["logger"] == "coordinator.access"] == []


def test_log_format_text_writes_readable_lines(database_url: str, tmp_path: Path) -> None:
    with (
        coordinator_serve(database_url, tmp_path, log_format="text") as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        assert http.get("/v1/no-such-route").status_code == 404
        line = _wait_for(
            server,
            lambda: next((ln for ln in server.output().splitlines() if "no-such" in ln), None),
            "access line",
        )
    assert re.match(
        r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO coordinator\.access: "
        r"GET /v1/no-such-route 404 [\d.]+ ms method=GET path=/v1/no-such-route "
        r"route=\(unmatched\) status=404 duration_ms=[\d.]+ client=127\.0\.0\.1$",
        line,
    ), line


def test_every_line_about_a_message_carries_its_ids(database_url: str, tmp_path: Path) -> None:
    dead_url = f"http://127.0.0.1:{free_port()}/check"
    with (
        coordinator_serve(database_url, tmp_path, global_args=["-v"], **CHECKS) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        # an end refused: the transaction is already resolved the other way
        ended = _prepare(http)
        end = f"/v1/transactions/{ended['transaction_id']}/end"
        assert http.post(end, json={"producer_group": "shop", "resolution": "commit"}).is_success
        refused = http.post(end, json={"producer_group": "shop", "resolution": "rollback"})
        assert refused.status_code == 409
        # a push that fails, then the discard (check_max 1)
        heartbeat = http.post(
            "/v1/producers/flaky/instances/i-1/heartbeat", json={"check_url": dead_url}
        )
        assert heartbeat.is_success
        discarded = _prepare(http, "flaky")

        def about(sent: dict[str, Any], words: str) -> list[dict[str, Any]]:
            return [
                line
                for line in _log_lines(server)
                if line["logger"] != "coordinator.access"
                and sent["transaction_id"] in line["message"]
                and words in line["message"]
            ]

        _wait_for(server, lambda: about(ended, "refused"), "refused end")
        _wait_for(server, lambda: about(discarded, "failed"), "failed push")
        _wait_for(server, lambda: about(discarded, "discarded"), "discard")
        lines = _log_lines(server)

    ids = {
        sent["transaction_id"]: sent["message_id"] for sent in (ended, discarded)
    }  # the messages of this test
    about_a_message = [
        line
        for line in lines
        if line["logger"] != "coordinator.access" and any(tid in line["message"] for tid in ids)
    ]
    assert len(about_a_message) >= 3
    for line in about_a_message:
        assert line["transaction_id"] in ids and line["transaction_id"] in line["message"], line
        assert line["message_id"] == ids[line["transaction_id"]], line
        assert isinstance(line["offset"], int), line
        assert line["producer_group"] in {"shop", "flaky"}, line


def test_verbose_logs_rounds_that_did_something_and_never_the_scheduler_ticks(
    database_url: str, tmp_path: Path
) -> None:
    with (
        coordinator_serve(database_url, tmp_path, global_args=["-v"], **CHECKS) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        time.sleep(3)  # some 30 rounds of the check-back job, with nothing due
        idle = server.output()
        instance = "/v1/producers/shop/instances/i-1"
        assert http.post(instance + "/heartbeat", json={}).is_success
        _prepare(http)
        checks = http.get(instance + "/checks", params={"wait_seconds": 20}).json()["checks"]
        assert len(checks) == 1
        rounds = _wait_for(
            server,
            lambda: [ln for ln in _log_lines(server) if "check-back round" in ln["message"]],
            "round summary",
        )
        output = server.output()

    assert "Running job" not in output and "executed successfully" not in output
    assert not [line for line in _log_lines_of(output) if line["logger"].startswith("apscheduler")]
    assert "check-back round" not in idle  # rounds that found nothing say nothing
    assert rounds[0]["level"] == "INFO"
    assert rounds[0]["message"].startswith("check-back round: 1 checked")
    assert (rounds[0]["checked"], rounds[0]["discarded"]) == (1, 0)


def _log_lines_of(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]
