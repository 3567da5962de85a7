"""The read-path benchmark runs end to end on a small table (its speeds are not judged here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from bench.pipeline_read import main, measure_read

pytestmark = pytest.mark.slow


def test_the_read_benchmark_measures_each_reader_on_the_same_rows(
    spark: SparkSession, database_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "pipeline_read.json"
    main(["--database-url", database_url, "--messages", "2000", "--repeat", "1", "--out", str(out)])
    result = json.loads(out.read_text())
    reads = {read["reader"]: read for read in result["reads"]}
    # A UNIX socket: no JDBC; the baseline and the columnar reader, each every row.
    assert set(reads) == {"rows", "arrow"}
    assert all(read["rows"] == 2000 and read["transport"] == "socket" for read in reads.values())
    assert reads["rows"]["vs_rows"] == 1.0 and reads["arrow"]["vs_rows"] > 0

    # What other benchmarks call: the pipeline's own read path for the URL.
    measured = measure_read(spark, database_url, repeat=1)
    assert (measured.reader, measured.rows) == ("pipeline", 2000)
    assert measured.rows_per_second > 0
    assert spark.range(3).count() == 3  # the shared session survived the benchmark
