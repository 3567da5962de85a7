"""Spark's JDBC source (what the benchmark measures the columnar read against) reads the
same DataFrame as the coordinator_postgres source, from a PostgreSQL on TCP."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from pyspark.sql import SparkSession

from bench.jdbc_read import JAR, driver_available, jdbc_connection, read_jdbc
from bench.tcp_postgres import tcp_postgres
from coordinator.db.urls import in_schema
from coordinator.pipeline.source import ReadSpec
from coordinator.pipeline.tables import read_postgres, utc_wall_clock
from tests.pipeline.test_source import EVERY_TYPE
from tests.system_packages import debian_file

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tcp_url() -> Iterator[str]:
    with tcp_postgres(prefix="coordinator-test-tcp-pg-") as server:
        server.create_database("every_type")
        with psycopg.connect(server.socket_url("every_type"), autocommit=True) as conn:
            conn.execute(EVERY_TYPE)
        yield server.tcp_url("every_type")


def test_jdbc_reads_the_same_frame_as_the_python_source(spark: SparkSession, tcp_url: str) -> None:
    spark.sql(f"ADD JAR {debian_file(JAR, 'libpostgresql-jdbc-java')}")
    assert driver_available(spark)
    query = "SELECT * FROM every_type"
    spec = ReadSpec.from_options(
        {"url": tcp_url, "query": query, "partition_column": "id", "num_partitions": "2"}
    )
    by_jdbc = read_jdbc(spark, spec)
    by_source = read_postgres(spark, tcp_url, query, partition_column="id", partitions=2)
    assert by_jdbc.rdd.getNumPartitions() == by_source.rdd.getNumPartitions() == 2
    assert by_jdbc.dtypes == by_source.dtypes
    assert utc_wall_clock(by_jdbc).orderBy("id").collect() == (
        utc_wall_clock(by_source).orderBy("id").collect()
    )


def test_only_a_tcp_url_goes_to_jdbc() -> None:
    assert jdbc_connection("postgresql://app:secret@db.internal:6432/shop?sslmode=require") == (
        "jdbc:postgresql://db.internal:6432/shop",
        {"user": "app", "password": "secret", "sslmode": "require"},
    )
    assert jdbc_connection("postgresql://postgres@/coordinator?host=/run/pg&port=5432") is None
    assert jdbc_connection("postgresql://app@db.internal/shop?sslcert=client.crt") is None


def test_the_coordinators_schema_goes_to_jdbc_as_its_current_schema() -> None:
    url = in_schema("postgresql://app:secret@db.internal:6432/shop", "coordinator")
    assert jdbc_connection(url) == (
        "jdbc:postgresql://db.internal:6432/shop",
        {"user": "app", "password": "secret", "currentSchema": "coordinator"},
    )
    other = "postgresql://app@db.internal/shop?options=-c%20statement_timeout%3D5"
    assert jdbc_connection(other) is None
