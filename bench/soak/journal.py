"""JSON-lines files that producer and consumer processes append to and the soak reads.

A line is written and flushed in one go before the step it records happens
(a producer that kills itself has already said so), so a file is always
whole lines but perhaps a torn last one from a process killed mid-write,
which the reader leaves for later and finally ignores.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class JournalWriter:
    """Appends records; safe to share between threads."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, **record: Any) -> None:
        line = json.dumps({"t": round(time.time(), 3), **record}, separators=(",", ":")) + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


class JournalReader:
    """Reads the records appended to the files of a directory since the last call."""

    def __init__(self, directory: Path, pattern: str = "*.jsonl") -> None:
        self.directory = directory
        self.pattern = pattern
        self._offsets: dict[Path, int] = {}

    def new_records(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(the file's stem, which names the process; a record), in file order."""
        for path in sorted(self.directory.glob(self.pattern)):
            offset = self._offsets.get(path, 0)
            with path.open("rb") as file:
                file.seek(offset)
                data = file.read()
            end = data.rfind(b"\n") + 1  # a torn last line waits for its end
            self._offsets[path] = offset + end
            for line in data[:end].splitlines():
                if line.strip():
                    yield path.stem, json.loads(line)
