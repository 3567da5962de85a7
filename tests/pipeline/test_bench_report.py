"""The report benchmark runs end to end on a small table, its figures checked against SQL's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from bench.pipeline_report import main

pytestmark = pytest.mark.slow


def test_the_report_benchmark_writes_its_json(
    spark: SparkSession, database_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "pipeline_report.json"
    flags = ("--messages", "3000", "--small", "0", "--repeat", "1", "--out", str(out))
    main(["--database-url", database_url, *flags])
    result = json.loads(out.read_text())
    (size,) = result["sizes"]
    assert size["messages"] == 3000 and size["hourly_rows"] > 0
    assert size["figures_compared"] > 3000  # every figure of every row, against SQL's
    assert size["sql_seconds"] > 0 and size["report_seconds"] > 0
    assert size["spark_figures_compared"] == size["figures_compared"]  # the Spark job's too
    assert size["spark_report_seconds"] > 0 and size["phases_in_process"]["read"] > 0
    assert size["read"]["rows"] == 3000 and size["read"]["rows_per_second"] > 0
    incremental = size["incremental"]
    assert 0 < incremental["rows_read"] < 3000 and incremental["closed_hours_reused"] > 0
    assert incremental["figures_compared"] > 3000
    assert spark.range(3).count() == 3  # the shared session survived the benchmark
