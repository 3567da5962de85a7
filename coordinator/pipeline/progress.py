"""What a job shows while it runs: one line per step, with its tasks' progress.

On a terminal, each step is a live rich progress bar fed by Spark's status
tracker (tasks done / tasks of the running stages), or, for work done in
this process, by the job itself (`tasks(done, total)`). Elsewhere (a scheduler's
log) each step prints one line when it starts and one when it ends, so the
log says how far a job got when it stopped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class JobProgress(Protocol):
    def step(self, description: str) -> AbstractContextManager[None]: ...

    def note(self, text: str) -> None: ...

    def tasks(self, done: int, total: int) -> None:
        """How far the running step is, for steps that run in this process."""


class QuietProgress:
    """For library use and tests: shows nothing."""

    @contextmanager
    def step(self, description: str) -> Iterator[None]:
        yield

    def note(self, text: str) -> None:
        pass

    def tasks(self, done: int, total: int) -> None:
        pass


class StepTimes:
    """A JobProgress that also records how long each step took, by a short name."""

    def __init__(self, shown: JobProgress) -> None:
        self.shown = shown
        self.seconds: dict[str, float] = {}

    @contextmanager
    def step(self, name: str, description: str) -> Iterator[None]:
        started = time.perf_counter()
        with self.shown.step(description):
            yield
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started

    def note(self, text: str) -> None:
        self.shown.note(text)

    def tasks(self, done: int, total: int) -> None:
        self.shown.tasks(done, total)


def _spark_tasks(spark: SparkSession) -> tuple[int, int]:
    """(completed, total) tasks of the stages running now."""
    tracker = spark.sparkContext.statusTracker()
    done = total = 0
    for stage_id in tracker.getActiveStageIds():
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            done += info.numCompletedTasks
            total += info.numTasks
    return done, total


class ConsoleProgress:
    def __init__(self, console: Console, spark: SparkSession | None = None) -> None:
        self.console = console
        self.spark = spark
        self.unit = "Spark tasks" if spark is not None else "tasks"
        self._reported: tuple[int, int] = (0, 0)  # from tasks(), without Spark

    def note(self, text: str) -> None:
        self.console.print(text, highlight=False, soft_wrap=True)

    def tasks(self, done: int, total: int) -> None:
        self._reported = (done, total)

    def _progress(self) -> tuple[int, int]:
        return _spark_tasks(self.spark) if self.spark is not None else self._reported

    @contextmanager
    def step(self, description: str) -> Iterator[None]:
        if self.console.is_terminal:
            with self._live_step(description):
                yield
            return
        started = time.monotonic()
        self.console.print(f"{description} ...", highlight=False)
        yield
        self.console.print(
            f"{description}: done in {time.monotonic() - started:.1f} s", highlight=False
        )

    @contextmanager
    def _live_step(self, description: str) -> Iterator[None]:
        columns = (
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(self.unit),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=self.console) as bar:
            task = bar.add_task(description, total=None)
            self._reported = (0, 0)
            stop = threading.Event()

            def follow() -> None:
                while not stop.wait(0.3):
                    try:
                        done, total = self._progress()
                    except Exception:  # the session is stopping: nothing more to show
                        return
                    if total:
                        bar.update(task, completed=done, total=total)

            follower = threading.Thread(target=follow, daemon=True)
            follower.start()
            try:
                yield
            finally:
                stop.set()
                follower.join()
                current = bar.tasks[0]
                bar.update(task, completed=current.total or 1, total=current.total or 1)
