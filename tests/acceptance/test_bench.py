"""The benchmark command runs end to end (its figures are not judged here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.run import main

pytestmark = pytest.mark.slow


def test_the_benchmark_runs_every_part_and_writes_json(tmp_path: Path, database_url: str) -> None:
    out = tmp_path / "result.json"
    main(
        [
            "--database-url", database_url,
            "--concurrency", "4", "8",
            "--seconds", "1",
            "--batch-size", "20",
            "--resolved-rows", "1000",
            "--backlog", "300",
            "--latency-samples", "5",
            "--out", str(out),
        ]
    )  # fmt: skip
    report = json.loads(out.read_text())
    assert report["baseline"]["messages_per_second"] > 0
    assert [run["producers"] for run in report["concurrency"]] == [4, 8]
    assert all(run["ratio"] > 0 for run in report["concurrency"])
    best = report["best_single_vs_best_baseline"]
    assert best["messages_per_second"] == max(
        run["http_single"]["messages_per_second"] for run in report["concurrency"]
    )
    assert best["baseline_messages_per_second"] == round(
        max(run["baseline"]["messages_per_second"] for run in report["concurrency"]), 1
    )
    assert best["ratio"] == pytest.approx(
        best["messages_per_second"] / best["baseline_messages_per_second"], abs=0.002
    )
    for part in ("http_single", "http_batch", "commit_to_consumer"):
        assert report[part]["messages"] > 0, part
        assert report[part]["p99_ms"] >= report[part]["p50_ms"] > 0, part
    assert [c["resolved_rows"] for c in report["check_claim"]] == [1000, 10000]
    assert all(c["backlog"] == 300 for c in report["check_claim"])
    assert report["claim_time_growth_10x"] > 0
