"""The SparkSession every pipeline job runs in, configured from flags and environment.

Master: `--master`, else COORDINATOR_SPARK_MASTER, else the one spark-submit
chose, else `local[*]`. `--conf key=value` pairs go to the session builder as
they are. Nothing is downloaded: the jobs need no jar (PostgreSQL is read by
the coordinator_postgres Python data source).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pyspark is the optional 'pipeline' extra: imported when a job starts
    from pyspark.sql import SparkSession

MASTER_ENV = "COORDINATOR_SPARK_MASTER"
PYTHON_CONF = "spark.pyspark.python"
DEFAULT_MASTER = "local[*]"

# Reports bucket by hour and the archive partitions by date: in UTC, whatever
# the machine's zone. Spark's console progress bar would garble our own.
DEFAULT_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
    # The pipeline's partition columns (date, topic) are read with an explicit
    # schema; a topic named "2024" must stay a string.
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    # Microsecond timestamps (not INT96): what PostgreSQL stores, and what
    # pyarrow reads and writes back unchanged when an archive run drops rows.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}


def parse_conf(pairs: list[str] | None) -> dict[str, str]:
    """`key=value` strings as a dict; a pair without '=' is a usage error."""
    conf: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--conf wants key=value, got {pair!r}")
        conf[key.strip()] = value
    return conf


def _launched_by_spark_submit() -> bool:
    # spark-submit starts the JVM first and tells the Python driver its port.
    return "PYSPARK_GATEWAY_PORT" in os.environ


def resolve_master(master: str | None) -> str | None:
    """The master to set, or None to keep what spark-submit configured."""
    if master:
        return master
    if os.environ.get(MASTER_ENV):
        return os.environ[MASTER_ENV]
    return None if _launched_by_spark_submit() else DEFAULT_MASTER


def master_named(master: str | None) -> bool:
    """Whether a Spark master was asked for: --master, $COORDINATOR_SPARK_MASTER, spark-submit."""
    return bool(master) or bool(os.environ.get(MASTER_ENV)) or _launched_by_spark_submit()


def use_this_python(conf: Mapping[str, str] | None = None) -> None:
    """Executors run the interpreter `--conf spark.pyspark.python` names, else
    $PYSPARK_PYTHON, else the driver's own (so the same packages where the path is the same)."""
    # PySpark takes the executors' interpreter from this variable alone when
    # a session starts; spark-submit sets it from spark.pyspark.python, a
    # command's --conf must too.
    named = (conf or {}).get(PYTHON_CONF)
    if named:
        os.environ["PYSPARK_PYTHON"] = named
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def build_session(
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    app_name: str = "coordinator",
    log_level: str = "WARN",
) -> SparkSession:
    from pyspark.sql import SparkSession

    from coordinator.pipeline.source import register

    use_this_python(conf)
    builder = SparkSession.builder.appName(app_name)
    chosen = resolve_master(master)
    if chosen is not None:
        builder = builder.master(chosen)
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register(spark)
    return spark


@contextmanager
def spark_session(
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    app_name: str = "coordinator",
    log_level: str = "WARN",
) -> Iterator[SparkSession]:
    """A session for one job; stopped afterwards unless it was already running."""
    from pyspark.sql import SparkSession

    already_running = SparkSession.getActiveSession() is not None
    # On a running session (tests, notebooks) getOrCreate applies the runtime
    # SQL settings (time zone, partition types) and the session is kept.
    spark = build_session(master, conf, app_name, log_level)
    try:
        yield spark
    finally:
        if not already_running:
            spark.stop()
