"""One local SparkSession for every pipeline test (starting Spark takes seconds)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from coordinator.pipeline.session import build_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "2",
            "spark.ui.enabled": "false",
        },
        app_name="coordinator-tests",
    )
    yield session
    session.stop()
    _stop_the_jvm()


def _stop_the_jvm() -> None:
    """End Spark's JVM with the tests: session.stop() leaves it running until
    this process exits."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    gateway.shutdown()
    jvm = gateway.proc
    jvm.stdin.close()  # the JVM exits when its stdin ends (pyspark's java_gateway.py)
    try:
        jvm.wait(timeout=30)
    except subprocess.TimeoutExpired:
        jvm.kill()
        jvm.wait()
    SparkContext._gateway = None
    SparkContext._jvm = None


@pytest.fixture(params=["spark", "in-process"])
def engine(request: pytest.FixtureRequest) -> SparkSession | None:
    """What run_report reads and reduces with: the Spark session, or None (in-process)."""
    if request.param == "spark":
        return request.getfixturevalue("spark")
    return None
