"""Spark's JDBC source over PostgreSQL on TCP: what the columnar read is measured against.

The pipeline reads PostgreSQL with its coordinator_postgres Python data source
only (docs/pipeline.md says why: on TCP both read equally fast, and only it
reaches a UNIX socket). This reads the same statement, in the same partitions,
with the PostgreSQL JDBC driver from Debian's `libpostgresql-jdbc-java`
(/usr/share/java/postgresql.jar, which must be in the session's `spark.jars`),
and casts each column to the type the Python source gives it, so that both
give the same DataFrame.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import quote

from psycopg.conninfo import conninfo_to_dict
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from coordinator.pipeline import columnar
from coordinator.pipeline.pgtypes import spark_schema
from coordinator.pipeline.source import ReadSpec, connect, plan_slices

JAR = Path("/usr/share/java/postgresql.jar")
DRIVER = "org.postgresql.Driver"
FETCH_SIZE = 10_000

# Connection parameters JDBC takes under the same name and meaning; a URL with
# any other one (a service file, client certificates, several hosts, ...) is
# read by the Python data source, which hands it to libpq as it is.
_PASSED_ON = ("user", "password", "sslmode", "application_name")
# libpq's `options` as the coordinator's URLs carry it (the schema its
# sessions start in, coordinator.db.urls.in_schema): JDBC's currentSchema.
_SEARCH_PATH_OPTION = re.compile(r"^\s*-c\s+search_path=([a-z_][a-z0-9_]*)\s*$")


def jdbc_connection(url: str) -> tuple[str, dict[str, str]] | None:
    """The JDBC URL and properties for a libpq URL on TCP, or None when JDBC cannot use it."""
    try:
        params = conninfo_to_dict(url)
    except Exception:
        return None
    host = params.pop("host", None) or os.environ.get("PGHOST")
    if not host or host.startswith("/") or "," in host:
        return None  # a UNIX socket, or several hosts
    port = params.pop("port", None) or os.environ.get("PGPORT") or "5432"
    dbname = params.pop("dbname", None)
    options = params.pop("options", None)
    schema = _SEARCH_PATH_OPTION.match(str(options)) if options is not None else None
    if options is not None and schema is None:
        return None  # other server options: JDBC has no general equivalent
    if set(params) - set(_PASSED_ON) or "," in str(port):
        return None
    user = params.get("user")
    if dbname is None and user is None:
        return None  # libpq would take both from the environment
    target = f"jdbc:postgresql://{host}:{port}/{quote(str(dbname or user), safe='')}"
    properties = {key: str(value) for key, value in params.items() if value is not None}
    if schema is not None:
        properties["currentSchema"] = schema.group(1)
    return target, properties


def driver_available(spark: SparkSession) -> bool:
    """Whether the session's JVM can load the PostgreSQL JDBC driver."""
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(DRIVER, False, loader)
    except Exception:
        return False
    return True


def read_jdbc(spark: SparkSession, spec: ReadSpec) -> DataFrame:
    """spec's query through Spark's JDBC source; the URL must be one jdbc_connection takes."""
    connection = jdbc_connection(spec.url)
    if connection is None:
        raise ValueError("Spark's JDBC source reads PostgreSQL on TCP only")
    target, properties = connection
    with connect(spec.url) as conn:
        query = columnar.render_query(conn, spec.query, spec.params)
        columns = columnar.describe(conn, query)
    statement = columnar.select_statement(query, columns)
    conditions = [piece.condition for piece in plan_slices(spec)]
    properties = {
        **properties,
        "driver": DRIVER,
        "fetchsize": str(FETCH_SIZE),
        "readOnly": "true",
        # timestamp without time zone stays a wall-clock time, as in pgtypes
        "preferTimestampNTZ": "true",
    }
    rows = spark.read.jdbc(
        target,
        f"({statement}) AS q",
        # One task per partition, each with its WHERE clause over q; one
        # partition without a condition reads everything.
        predicates=[condition or "true" for condition in conditions],
        properties=properties,
    )
    expected = spark_schema(columns)
    return rows.select(
        *(F.col(f"`{field.name}`").cast(field.dataType).alias(field.name) for field in expected)
    )
