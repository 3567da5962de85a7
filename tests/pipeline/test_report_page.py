"""report.html in a real browser (headless Chromium): the tables fit, every header shows."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from pyspark.sql import SparkSession

from coordinator.pipeline.report import ReportOptions, ReportResult, run_report
from tests.browser import browser  # noqa: F401
from tests.pipeline.data import add_message, seed

AS_OF = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
LONG_GROUP = "payments-settlement-reconciliation-service"
LONG_TOPIC = "eu-west-1.payments.settlement.v2"
# A normal window, and half of one (the page is meant to adapt).
VIEWPORTS = [(1280, 900), (800, 900)]

# Per table: the box it is in, the table's and the box's widths, and each header's edges.
MEASURE_TABLES = """
() => [...document.querySelectorAll('table')].map(table => {
    const box = table.parentElement;
    const rect = box.getBoundingClientRect();
    return {
        boxLeft: rect.left, boxRight: rect.right,
        boxClientWidth: box.clientWidth, boxScrollWidth: box.scrollWidth,
        tableScrollWidth: table.scrollWidth,
        headers: [...table.querySelectorAll('th')].map(th => {
            const r = th.getBoundingClientRect();
            return {text: th.textContent, left: r.left, right: r.right, width: r.width};
        }),
    };
})
"""


def _report(
    spark: SparkSession, database_url: str, db: psycopg.Connection, out: Path
) -> ReportResult:
    """A report of 2,500 generated messages, plus a 10 ms producer with long names."""
    db.execute(
        "INSERT INTO subscriptions (consumer_group, topic, expression) "
        "VALUES ('billing', 'topic-0', '*')"
    )
    seed(db, 2_500, anchor=AS_OF - timedelta(hours=1), span_hours=30, groups=3, topics=3)
    born = AS_OF - timedelta(hours=2)
    for n in range(3):
        add_message(
            db,
            transaction_id=f"fast-{n}",
            producer_group=LONG_GROUP,
            topic=LONG_TOPIC,
            born_at=born,
            resolved_at=born + timedelta(milliseconds=10),
        )
    return run_report(spark, database_url, ReportOptions(out, as_of=AS_OF, partitions=2))


def _measure(chromium: Any, html: Path, width: int, height: int, screenshot: Path) -> tuple:
    page = chromium.new_page(viewport={"width": width, "height": height})
    try:
        page.goto(html.as_uri())
        page.screenshot(path=str(screenshot), full_page=True)
        return page.evaluate(MEASURE_TABLES), page.evaluate(
            "() => document.documentElement.scrollWidth"
        )
    finally:
        page.close()


def test_every_table_fits_the_page_with_every_header_visible(
    spark: SparkSession,
    database_url: str,
    db: psycopg.Connection,
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    report = _report(spark, database_url, db, tmp_path / "report")

    for width, height in VIEWPORTS:
        shot = tmp_path / f"report-{width}px.png"
        tables, page_width = _measure(browser, report.html, width, height, shot)
        assert page_width <= width, width  # the page never scrolls sideways
        for box in tables:
            assert box["tableScrollWidth"] <= box["boxClientWidth"], (width, box)
            assert box["boxScrollWidth"] <= box["boxClientWidth"], (width, box)
            for header in box["headers"]:
                assert header["width"] > 0, (width, header)
                assert box["boxLeft"] <= header["left"], (width, header)
                assert header["right"] <= min(box["boxRight"], width), (width, header)
        assert len(tables) == 3  # counts, timings, consumer lag
        headers = [h["text"] for box in tables for h in box["headers"]]
        assert {"oldest pending", "expiry rate", "latency p99", "dead letters"} <= set(headers)

    page = report.html.read_text()
    assert LONG_GROUP in page and LONG_TOPIC in page
    assert re.search(r">\d\.\d\d %</td>", page) and re.search(r">\d\.\d+ d</td>", page)
    assert ' title="0.010000 s">10 ms</td>' in page
