"""Log lines on stderr: one JSON object per line for machines, readable text on a terminal.

Every process of the coordinator logs through Python's `logging` to stderr,
configured here once (`configure` for a command, `server_log_config` for the
processes of `coordinator serve`, which uvicorn applies in each of them):

- format `auto` (the default) writes JSON lines when stderr is not a
  terminal (a file, journald, a container's log) and text on a terminal;
  `json` and `text` force one. A JSON line holds `time` (UTC, ISO 8601),
  `level`, `logger`, `message`, the fields the line was logged with
  (`extra=`: `transaction_id`, `message_id`, `method`, `status`, ...) and
  `exception` (the traceback) if any. Text lines end with the fields as
  `name=value`.
- level WARNING, INFO with `-v` (`--verbose`);
- the access log (`coordinator.access`, one line per HTTP request and gRPC
  call) is on at INFO whatever the level, unless the setting `access_log`
  turns it off; the doors check `ACCESS.isEnabledFor(INFO)` first, so a
  request costs nothing more when it is off. Its lines go out in batches
  (`access_line`), each stamped with its request's time;
- APScheduler logs two INFO lines per run of the check-back job (several a
  second); its loggers stay at WARNING even with `-v`. The job logs its
  own summary of a round that did something.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import logging.config
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, Literal

LogFormat = Literal["auto", "json", "text"]

ACCESS_LOGGER = "coordinator.access"
ACCESS = logging.getLogger(ACCESS_LOGGER)

# The attributes every LogRecord has: anything else on a record came with
# the line, as extra= fields. (taskName is new in Python 3.12.)
_RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {
    "message",
    "asctime",
    "taskName",
}

# What the command line asked for, so that `coordinator serve` hands the
# same verbosity to uvicorn's configuration of every server process.
_verbose = False


def fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a line was logged with (extra=), in the order they were given."""
    return {k: v for k, v in record.__dict__.items() if k not in _RECORD_ATTRIBUTES}


_second: list[Any] = [None, ""]  # the last second formatted, and its text


def _utc(created: float) -> str:
    """`2025-01-31T12:00:00.123Z`: the second formatted once, the milliseconds each time
    (a tenth of datetime.isoformat's cost, paid on every access line)."""
    seconds = int(created)
    last = _second
    if last[0] != seconds:
        last[1] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        last[0] = seconds
    return f"{last[1]}.{int((created - seconds) * 1000):03d}Z"


# One encoder for every line: json.dumps with arguments builds a new one each call.
# default=str: a field that is not JSON (a datetime, an enum) is written as text.
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the line's fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in record.__dict__.items():
            if name not in _RECORD_ATTRIBUTES:
                entry.setdefault(name, value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return _ENCODER.encode(entry)


class TextFormatter(logging.Formatter):
    """`time LEVEL logger: message name=value ...`, for a person at a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = fields(record)
        if not extra:
            return line
        pairs = " ".join(f"{name}={value}" for name, value in extra.items())
        head, newline, rest = line.partition("\n")  # a traceback stays below the line
        return f"{head} {pairs}{newline}{rest}"


def formatter(log_format: LogFormat = "auto") -> logging.Formatter:
    """The formatter for `log_format`; `auto` looks at this process's stderr."""
    if log_format == "auto":
        log_format = "text" if _is_terminal(sys.stderr) else "json"
    return TextFormatter() if log_format == "text" else JsonFormatter()


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no stream, or a closed one
        return False


class StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is when the line is logged, not when configured:
    a process embedding the coordinator (its tests among them) may swap the stream
    and close the old one."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass  # always the current sys.stderr


def log_config(
    *, verbose: bool = False, log_format: LogFormat = "auto", access_log: bool = True
) -> dict[str, Any]:
    """The `logging.config.dictConfig` of a coordinator process."""
    return {
        "version": 1,
        # Loggers created before (the coordinator's modules', uvicorn's) keep working.
        "disable_existing_loggers": False,
        "formatters": {
            # A factory: `auto` is decided in each process, by its own stderr.
            "coordinator": {"()": f"{__name__}.formatter", "log_format": log_format},
        },
        "handlers": {
            "stderr": {"()": f"{__name__}.StderrHandler", "formatter": "coordinator"},
        },
        "root": {"level": "INFO" if verbose else "WARNING", "handlers": ["stderr"]},
        "loggers": {
            ACCESS_LOGGER: {"level": "INFO" if access_log else "WARNING"},
            # "Running job ..." and "... executed successfully" at every run of the job
            "apscheduler": {"level": "WARNING"},
            # uvicorn's own loggers carry handlers of its default configuration;
            # here they go to the root's like every other line (uvicorn sets their
            # level itself, from serve's log_level).
            "uvicorn": {"handlers": [], "propagate": True},
            "uvicorn.error": {"handlers": [], "propagate": True},
            "uvicorn.access": {"handlers": [], "propagate": True},
        },
    }


def configure(
    *, verbose: bool = False, log_format: LogFormat = "auto", access_log: bool = True
) -> None:
    """Configure this process's logging (a command's; serve's processes: server_log_config)."""
    global _verbose
    _verbose = verbose
    logging.config.dictConfig(
        log_config(verbose=verbose, log_format=log_format, access_log=access_log)
    )


def server_log_config(log_format: LogFormat, access_log: bool) -> dict[str, Any]:
    """uvicorn's `log_config` for `coordinator serve`: applied in the server process and
    in each `--workers` process, with the verbosity the command line gave `configure`."""
    return log_config(verbose=_verbose, log_format=log_format, access_log=access_log)


# Access lines go out in batches, like nginx's buffered access_log: written
# one after the other, a line costs about half the CPU it costs alone between
# two requests, because logging's code and data stay in the CPU's caches
# (`python -m bench.grpc_door_cpu`: 87 against 48 µs for a gRPC message's
# two lines). A line waits at most ACCESS_FLUSH_SECONDS, or until
# ACCESS_BATCH_LINES wait; without an event loop it is written at once.
ACCESS_FLUSH_SECONDS = 0.1
ACCESS_BATCH_LINES = 256

_Line = tuple[float, str, tuple[Any, ...], Mapping[str, Any]]


class _AccessBatch(threading.local):
    """This thread's access lines not yet written, and the task of its event loop
    that writes them (each serving thread runs one loop)."""

    def __init__(self) -> None:
        self.lines: list[_Line] = []
        self.writer: asyncio.Task[None] | None = None


_batch = _AccessBatch()


def access_line(message: str, args: tuple[Any, ...], line_fields: Mapping[str, Any]) -> None:
    """Log one access line, stamped now, written soon; check
    ACCESS.isEnabledFor(logging.INFO) first."""
    batch = _batch
    batch.lines.append((time.time(), message, args, line_fields))
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        flush_access_lines()
        return
    if len(batch.lines) >= ACCESS_BATCH_LINES:
        flush_access_lines()
    elif batch.writer is None or batch.writer.get_loop() is not loop:
        batch.writer = loop.create_task(_write_soon())


async def _write_soon() -> None:
    # A task, not a timer: when its loop ends, asyncio.run (and uvicorn, and
    # anyio) cancel the tasks left, and this one then writes its lines, so
    # no line outlives its loop.
    try:
        await asyncio.sleep(ACCESS_FLUSH_SECONDS)
    finally:
        if _batch.writer is asyncio.current_task():
            _batch.writer = None
        _write_lines()


def flush_access_lines() -> None:
    """Write this thread's waiting access lines now (a node does when it stops, and
    the process at exit)."""
    writer, _batch.writer = _batch.writer, None
    if writer is not None and not writer.done():
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if writer.get_loop() is running:
            writer.cancel()  # it finds nothing left to write
    _write_lines()


def _write_lines() -> None:
    lines, _batch.lines = _batch.lines, []
    for created, message, args, line_fields in lines:
        # Made directly: Logger.info would also look up the caller's source
        # line in the stack, a third of a line's cost, for nothing.
        record = ACCESS.makeRecord(
            ACCESS_LOGGER, logging.INFO, "(access)", 0, message, args, None, extra=line_fields
        )
        # Stamped with the request's time, not the write's.
        record.relativeCreated -= (record.created - created) * 1000
        record.created = created
        record.msecs = int((created - int(created)) * 1000) + 0.0
        ACCESS.handle(record)


atexit.register(flush_access_lines)
