"""An archive run whose driver dies mid-run: SIGKILL to its whole process group.

    python -m tests.pipeline.crashing_archive --database-url URL --archive-dir DIR \
        --master spark://... [--conf key=value ...] --kill-at CHECKPOINT[:OCCURRENCE] \
        [--while-tasks-run]

Killed at the checkpoint (its OCCURRENCE-th time, default the first); with
--while-tasks-run, after the checkpoint, as soon as Spark reports a running
task (executors in the middle of the next step's work), or at the next
checkpoint if no task was seen before it.

The driver process and its Spark JVM go at once, as when the driver's
machine fails: no exception handler, no `finally`, no session stop; the
executors lose their driver and the database its connections (and the
archive lock). Started with start_new_session=True, so the group is this
run alone. Exits 3 if it was never killed.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from pyspark.sql import SparkSession

from coordinator.pipeline.archive import CHECKPOINTS, ArchiveOptions, run_archive
from coordinator.pipeline.session import build_session, parse_conf

NOT_REACHED = 3
POLL_SECONDS = 0.02


def kill_the_driver(why: str) -> None:
    print(f"killing the driver {why}", flush=True)
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _running_tasks(spark: SparkSession) -> int:
    tracker = spark.sparkContext.statusTracker()
    infos = (tracker.getStageInfo(stage) for stage in tracker.getActiveStageIds())
    return sum(info.numActiveTasks for info in infos if info is not None)


def _kill_when_tasks_run(spark: SparkSession, after: str) -> None:
    def watch() -> None:
        while not _running_tasks(spark):
            threading.Event().wait(POLL_SECONDS)
        kill_the_driver(f"while tasks run after {after}")

    threading.Thread(target=watch, daemon=True).start()


def killer(
    spark: SparkSession, name: str, occurrence: int, while_tasks_run: bool
) -> Callable[[str], None]:
    seen = Counter[str]()

    def hook(reached: str) -> None:
        seen[reached] += 1
        if watching:
            kill_the_driver(f"at {reached}, no running task seen after {name}")
        if reached == name and seen[reached] == occurrence:
            if not while_tasks_run:
                kill_the_driver(f"at {name} #{occurrence}")
            watching.append(name)
            _kill_when_tasks_run(spark, name)

    watching: list[str] = []
    return hook


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--archive-dir", type=Path, required=True)
    parser.add_argument("--master", required=True)
    parser.add_argument("--conf", action="append", default=[])
    parser.add_argument("--kill-at", required=True)
    parser.add_argument("--while-tasks-run", action="store_true")
    parser.add_argument("--batch-size", type=int, default=25)
    parser.add_argument("--partitions", type=int, default=3)
    args = parser.parse_args()
    name, _, occurrence = args.kill_at.partition(":")
    if name not in CHECKPOINTS:
        parser.error(f"--kill-at: no checkpoint {name!r} (one of {', '.join(CHECKPOINTS)})")

    spark = build_session(args.master, parse_conf(args.conf))
    options = ArchiveOptions(
        args.archive_dir, timedelta(hours=72), args.batch_size, args.partitions
    )
    hook = killer(spark, name, int(occurrence or 1), args.while_tasks_run)
    run_archive(spark, args.database_url, options, checkpoint=hook)
    print(f"the run ended without being killed ({args.kill_at})", flush=True)
    sys.exit(NOT_REACHED)


if __name__ == "__main__":
    main()
