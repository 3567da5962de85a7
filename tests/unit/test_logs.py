"""The log formats of coordinator/logs.py, line by line."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from coordinator import logs


def _record(**extra: object) -> logging.LogRecord:
    logger = logging.getLogger("coordinator.test")
    return logger.makeRecord(
        logger.name, logging.INFO, __file__, 1, "ended %s", ("5b1e",), None, extra=extra
    )


def test_a_json_line_has_time_level_logger_message_and_the_fields() -> None:
    line = logs.JsonFormatter().format(_record(transaction_id="5b1e", offset=7))
    entry = json.loads(line)
    assert list(entry) == ["time", "level", "logger", "message", "transaction_id", "offset"]
    assert entry["level"] == "INFO" and entry["logger"] == "coordinator.test"
    assert entry["message"] == "ended 5b1e"
    assert (entry["transaction_id"], entry["offset"]) == ("5b1e", 7)
    assert entry["time"].endswith("Z") and len(entry["time"]) == len("2025-01-31T12:00:00.123Z")


def test_a_json_line_holds_the_traceback_and_stays_one_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.getLogger("x").makeRecord(
            "x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info()
        )
    line = logs.JsonFormatter().format(record)
    assert "\n" not in line
    assert "ValueError: boom" in json.loads(line)["exception"]


def test_a_field_that_is_not_json_is_written_as_text() -> None:
    entry = json.loads(logs.JsonFormatter().format(_record(at=object)))
    assert entry["at"] == str(object)


def test_a_text_line_ends_with_the_fields() -> None:
    line = logs.TextFormatter().format(_record(transaction_id="5b1e", offset=7))
    assert line.endswith(" INFO coordinator.test: ended 5b1e transaction_id=5b1e offset=7")


def test_auto_writes_json_to_a_file_and_text_to_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert isinstance(logs.formatter("auto"), logs.JsonFormatter)
    leader, follower = os.openpty()
    with os.fdopen(follower, "w") as terminal:
        monkeypatch.setattr(sys, "stderr", terminal)
        assert isinstance(logs.formatter("auto"), logs.TextFormatter)
        assert isinstance(logs.formatter("json"), logs.JsonFormatter)
    os.close(leader)


def test_the_access_log_is_on_without_verbose_and_apscheduler_stays_quiet_with_it(
    restored_logging: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    logs.configure(verbose=True)
    assert not logging.getLogger("apscheduler.executors.default").isEnabledFor(logging.INFO)
    logs.configure(verbose=False)
    assert logs.ACCESS.isEnabledFor(logging.INFO)
    assert not logging.getLogger("coordinator.core").isEnabledFor(logging.INFO)
    logs.access_line("%s %s", ("GET", "/x"), {"method": "GET", "path": "/x"})
    written = json.loads(sys.stderr.getvalue())
    assert (written["logger"], written["message"], written["path"]) == (
        "coordinator.access",
        "GET /x",
        "/x",
    )
    logs.configure(access_log=False)
    assert not logs.ACCESS.isEnabledFor(logging.INFO)


def _access_lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


@pytest.fixture
def access_lines_flushed(restored_logging: None) -> Iterator[None]:
    yield
    logs.flush_access_lines()  # nothing of this test's is left for another's


def _access_to_a_string(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    # In the test's body: pytest puts its own sys.stderr back after the fixtures.
    written = io.StringIO()
    monkeypatch.setattr(sys, "stderr", written)
    logs.configure(log_format="json")
    return written


def test_in_an_event_loop_access_lines_go_out_together_with_their_own_times(
    access_lines_flushed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    access_to_a_string = _access_to_a_string(monkeypatch)
    # Longer than the default, so that a busy machine cannot make the batch
    # go out before the test looks.
    monkeypatch.setattr(logs, "ACCESS_FLUSH_SECONDS", 0.5)

    async def serve() -> tuple[float, list[dict[str, object]]]:
        started = time.time()
        for n in range(3):
            logs.access_line("GET /%d", (n,), {"path": f"/{n}"})
            await asyncio.sleep(0.02)
        waiting = _access_lines(access_to_a_string)
        await asyncio.sleep(1.0)
        return started, waiting

    started, waiting = asyncio.run(serve())
    assert waiting == [], "not written line by line"
    lines = _access_lines(access_to_a_string)
    assert [line["path"] for line in lines] == ["/0", "/1", "/2"]
    # Each line holds the time it was logged, not the time the batch went out.
    stamps = [
        datetime.strptime(str(line["time"]), "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        for line in lines
    ]
    assert stamps == sorted(stamps)
    assert stamps[0].timestamp() < started + 0.015
    assert 0.03 <= (stamps[2] - stamps[0]).total_seconds() < 0.45


def test_a_full_batch_is_written_at_once(
    access_lines_flushed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    access_to_a_string = _access_to_a_string(monkeypatch)

    async def serve() -> list[dict[str, object]]:
        for n in range(logs.ACCESS_BATCH_LINES):
            logs.access_line("GET /%d", (n,), {"path": f"/{n}"})
        return _access_lines(access_to_a_string)

    assert len(asyncio.run(serve())) == logs.ACCESS_BATCH_LINES


def test_lines_waiting_when_their_loop_ends_are_written_then(
    access_lines_flushed: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    access_to_a_string = _access_to_a_string(monkeypatch)
    monkeypatch.setattr(logs, "ACCESS_FLUSH_SECONDS", 3600.0)

    async def request(path: str) -> list[dict[str, object]]:
        logs.access_line("GET %s", (path,), {"path": path})
        await asyncio.sleep(0.05)
        return _access_lines(access_to_a_string)

    assert asyncio.run(request("/first")) == [], "waiting for its batch"
    # asyncio.run ended the loop, cancelling the task that was to write them.
    assert [line["path"] for line in _access_lines(access_to_a_string)] == ["/first"]

    async def flushed() -> list[dict[str, object]]:
        await request("/second")
        logs.flush_access_lines()  # what a node does when it stops
        return _access_lines(access_to_a_string)

    assert [line["path"] for line in asyncio.run(flushed())] == ["/first", "/second"]
