"""The log formats of coordinator/logs.py, line by line."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
from collections.abc import Iterator

import pytest

from coordinator import logs


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """configure() replaces the process's logging; put back what pytest had."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    access_level = logs.ACCESS.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logs.ACCESS.setLevel(access_level)
    logging.getLogger("apscheduler").setLevel(logging.NOTSET)


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
