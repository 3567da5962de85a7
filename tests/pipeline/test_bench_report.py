"""The report benchmark runs end to end on a small table (its figures are not judged here)."""

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
    main(["--database-url", database_url, "--messages", "3000", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["messages"] == 3000 and result["hourly_rows"] > 0
    assert result["sql_seconds"] > 0 and result["spark_report_seconds"] > 0
    assert result["ratio_spark_to_sql"] > 0
    assert spark.range(3).count() == 3  # the shared session survived the benchmark
