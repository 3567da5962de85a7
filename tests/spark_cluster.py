"""A real Spark standalone cluster for tests: one master and its workers, on loopback.

Started from the installed PySpark (`spark-class ...deploy.master.Master` and
`...deploy.worker.Worker`), each process in a session of its own, so that
stopping a worker's process group also ends the executors it launched and
their Python workers. Everything is stopped when the block ends, however it
ends. Every wait is bounded.

Jobs are submitted from other processes (a test's own process already holds
a local SparkContext, and a process has one): give them `cluster.environment()`
and `--master cluster.master_url`.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.server import free_port
from tests.processes import stop_group

# Generous: a master and its workers register in about ten seconds, but the
# machine may be busy with other test sessions.
STARTUP_SECONDS = 120.0
WORKER_MEMORY = "1g"
# Loopback only: with SPARK_LOCAL_IP every Spark process (master, workers,
# executors, drivers) binds its RPC ports and web UIs to this address.
LOOPBACK = "127.0.0.1"
# The master's REST submission server listens on a fixed port (6066), which
# two test sessions would fight over; jobs are submitted over its RPC port.
MASTER_PROPERTIES = "spark.master.rest.enabled false\n"
# An executor's log line for each task it completed.
_FINISHED_TASK = re.compile(r"Executor: Finished task ", re.MULTILINE)


def spark_class() -> Path:
    """The installed PySpark's spark-class launcher."""
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


@dataclass(frozen=True)
class SparkWorker:
    web_url: str
    work_dir: Path  # per application: <work_dir>/<app id>/<executor id>/stderr


@dataclass
class SparkCluster:
    master_url: str  # spark://127.0.0.1:PORT, for --master
    web_url: str  # the master's web UI; /json/ is its state
    workers: list[SparkWorker]
    directory: Path

    def environment(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment for a driver process submitting to this cluster.

        Drivers bind to loopback too. Which Python the executors run is left
        to the pipeline (it ships the driver's interpreter to them): no
        PYSPARK_* variable of this process (the tests' own session sets them) is passed on.
        """
        environment = _inherited()
        environment.update(_spark_environment(self.directory / "driver-local"))
        environment.update(extra or {})
        return environment

    def status(self) -> dict[str, Any]:
        return httpx.get(f"{self.web_url}/json/", timeout=10).json()  # type: ignore[no-any-return]

    def applications(self, name: str) -> list[dict[str, Any]]:
        """The master's applications (running or completed) of this name, oldest first."""
        status = self.status()
        found = [a for a in status["activeapps"] + status["completedapps"] if a["name"] == name]
        return sorted(found, key=lambda app: app["starttime"])

    def finished_tasks(self, app_id: str) -> list[int]:
        """Per worker, how many tasks of the application its executors completed."""
        counts = []
        for worker in self.workers:
            logs = sorted((worker.work_dir / app_id).glob("*/stderr"))
            counts.append(
                sum(len(_FINISHED_TASK.findall(log.read_text(errors="replace"))) for log in logs)
            )
        return counts


def _inherited() -> dict[str, str]:
    """This process's environment without COORDINATOR_* and PYSPARK_* variables."""
    dropped = ("COORDINATOR_", "PYSPARK_")
    return {k: v for k, v in os.environ.items() if not k.startswith(dropped)}


def _spark_environment(local_dirs: Path) -> dict[str, str]:
    local_dirs.mkdir(parents=True, exist_ok=True)
    return {
        "SPARK_LOCAL_IP": LOOPBACK,
        # Shuffle and block files here, not in /tmp/spark-*, removed with the test's directory.
        "SPARK_LOCAL_DIRS": str(local_dirs),
    }


def _start(command: list[str], log: Path, environment: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as output:
        return subprocess.Popen(
            command,
            cwd=log.parent,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def _tail(log: Path, lines: int = 40) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


@contextmanager
def spark_cluster(directory: Path, workers: int = 2) -> Iterator[SparkCluster]:
    """A master and `workers` workers of one core each, all registered when yielded."""
    directory.mkdir(parents=True, exist_ok=True)
    launcher = str(spark_class())
    environment = {**_inherited(), **_spark_environment(directory / "local")}
    properties = directory / "spark-master.properties"
    properties.write_text(MASTER_PROPERTIES)
    port, web_port = free_port(), free_port()
    cluster = SparkCluster(
        master_url=f"spark://{LOOPBACK}:{port}",
        web_url=f"http://{LOOPBACK}:{web_port}",
        workers=[],
        directory=directory,
    )
    logs: list[Path] = []
    processes: list[subprocess.Popen[bytes]] = []
    with ExitStack() as stack:
        # Stopped in reverse order: workers (and their executors) first, then the master.
        master_log = directory / "master.log"
        master = _start(
            [
                launcher,
                "org.apache.spark.deploy.master.Master",
                "--host",
                LOOPBACK,
                "--port",
                str(port),
                "--webui-port",
                str(web_port),
                "--properties-file",
                str(properties),
            ],
            master_log,
            environment,
        )
        stack.callback(stop_group, master)
        processes.append(master)
        logs.append(master_log)
        for number in range(1, workers + 1):
            work_dir = directory / f"worker-{number}"
            work_dir.mkdir()
            worker_web_port = free_port()
            log = directory / f"worker-{number}.log"
            worker = _start(
                [
                    launcher,
                    "org.apache.spark.deploy.worker.Worker",
                    cluster.master_url,
                    "--host",
                    LOOPBACK,
                    "--cores",
                    "1",
                    "--memory",
                    WORKER_MEMORY,
                    "--webui-port",
                    str(worker_web_port),
                    "--work-dir",
                    str(work_dir),
                ],
                log,
                environment,
            )
            stack.callback(stop_group, worker)
            processes.append(worker)
            logs.append(log)
            cluster.workers.append(SparkWorker(f"http://{LOOPBACK}:{worker_web_port}", work_dir))
        _wait_registered(cluster, workers, processes, logs)
        yield cluster


def _wait_registered(
    cluster: SparkCluster,
    expected: int,
    processes: list[subprocess.Popen[bytes]],
    logs: list[Path],
) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    alive = 0
    while True:
        for process, log in zip(processes, logs, strict=True):
            if process.poll() is not None:
                raise RuntimeError(f"{log.stem} exited ({process.returncode}):\n{_tail(log)}")
        with suppress(httpx.TransportError, ValueError):
            alive = cluster.status()["aliveworkers"]
            if alive >= expected:
                return
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {log.name}\n{_tail(log)}" for log in logs)
            raise RuntimeError(
                f"{alive} of {expected} Spark workers registered within {STARTUP_SECONDS:.0f} s:\n"
                f"{tails}"
            )
        time.sleep(0.3)
