"""The status page's figures, /metrics' database gauges and `coordinator status` read a
streaming standby when read_database_url names it; every write still goes to the primary.

A real primary and a real hot standby of it (tests/streaming_standby.py), the
standby's replay paused to tell the two apart: what the primary committed
meanwhile shows only where the primary is read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from typer.testing import CliRunner

from coordinator.cli import app
from tests.conftest import LiveServer
from tests.overview_data import ORDER_SVC, ORDERS, overview_settings
from tests.scrape import scrape
from tests.streaming_standby import StreamingStandby, database_on_both, streaming_standby

pytestmark = pytest.mark.slow

runner = CliRunner()


@pytest.fixture(scope="module")
def pair() -> Iterator[StreamingStandby]:
    with streaming_standby() as started:
        yield started


@pytest.fixture
def urls(pair: StreamingStandby) -> Iterator[tuple[str, str]]:
    """A migrated database of this test's own: its primary URL and its standby URL."""
    with database_on_both(pair, "status") as both:
        yield both


def _send(http: httpx.Client) -> None:
    answer = http.post(
        "/v1/transactions",
        json={"topic": ORDERS, "producer_group": ORDER_SVC, "body_text": "order"},
    )
    assert answer.status_code in (200, 201), answer.text
    assert answer.json()["state"] == "prepared"


def _status(primary: str, standby: str | None) -> int:
    """`coordinator status --json`'s pending half messages, the read URL given after it."""
    read = ["--read-database-url", standby] if standby else []
    result = runner.invoke(
        app, ["--database-url", primary, "status", "--json", *read], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    # stdout only: the served node's access lines go to stderr meanwhile.
    return json.loads(result.stdout)["pending"]


def _figures(http: httpx.Client) -> tuple[int, float]:
    """The pending half messages of the page's JSON, and of /metrics."""
    overview = http.get("/v1/overview")
    assert overview.status_code == 200, overview.text
    gauge = scrape(str(http.base_url).rstrip("/")).value(
        "coordinator_half_messages_outstanding", producer_group=ORDER_SVC, topic=ORDERS
    )
    return overview.json()["pending"], gauge


def test_the_status_page_metrics_and_status_read_the_standby(
    pair: StreamingStandby, urls: tuple[str, str], restored_logging: None
) -> None:
    primary, standby = urls
    settings = overview_settings(read_database_url=standby)
    with (
        LiveServer(primary, settings) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        _send(http)
        pair.wait_for_replay()
        assert http.get("/").status_code == 200
        assert _figures(http) == (1, 1)
        assert _status(primary, standby) == 1

        pair.pause_replay()
        _send(http)  # a standby refuses writes: this one went to the primary
        assert _figures(http) == (1, 1)
        assert _status(primary, standby) == 1
        assert _status(primary, None) == 2  # without the setting: the primary

        pair.resume_replay()
        pair.wait_for_replay()
        assert _figures(http) == (2, 2)
        assert _status(primary, standby) == 2
