"""One status line while the soak runs: live on a terminal, every few seconds in a log."""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.text import Text

LOG_EVERY_SECONDS = 10.0


class ProgressView:
    def __init__(self, console: Console) -> None:
        self.console = console
        # Refreshed by show() only, never by a thread of its own: children
        # are started with a preexec_fn, which is only safe while the soak
        # runs a single thread.
        self._live = (
            Live(console=console, auto_refresh=False, transient=True)
            if console.is_terminal
            else None
        )
        self._last_logged = 0.0

    def __enter__(self) -> ProgressView:
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.stop()

    def show(self, line: str) -> None:
        if self._live is not None:
            self._live.update(Text(line), refresh=True)
        elif time.monotonic() - self._last_logged >= LOG_EVERY_SECONDS:
            self._last_logged = time.monotonic()
            self.console.print(line, highlight=False, soft_wrap=True)

    def note(self, line: str) -> None:
        """A line that stays (a phase starting, a fault)."""
        self.console.print(line, highlight=False, soft_wrap=True)
