"""The status page, its JSON (GET /v1/overview), the database gauges of /metrics and
the offline /docs, over HTTP on a served coordinator. The browser's view of
them is in test_status_page_browser.py."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from urllib.parse import urlparse

import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from coordinator.config import Settings
from coordinator.core import Coordinator
from tests.conftest import LiveServer
from tests.overview_data import (
    BILLING,
    ORDER_SVC,
    ORDERS,
    PAYMENT_SVC,
    PAYMENTS,
    expected_figures,
    overview_settings,
    seed,
)


@pytest.fixture
def settings() -> Settings:
    return overview_settings()


@pytest.fixture
def seeded(database_url: str, db: psycopg.Connection, settings: Settings) -> None:
    async def run() -> None:
        async with Coordinator.connect(database_url, settings) as core:
            await seed(core, db)

    asyncio.run(run())


@pytest.fixture
def http(live_server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_server.url, timeout=30) as client:
        yield client


def _assets(html: str) -> list[str]:
    return re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html)


@pytest.mark.parametrize("path", ["/", "/status"])
def test_the_page_and_its_assets_come_from_the_coordinator(http: httpx.Client, path: str) -> None:
    page = http.get(path)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assets = _assets(page.text)
    assert {"/static/status.js", "/static/status.css"} <= set(assets)
    for asset in assets:
        assert not urlparse(asset).netloc, asset  # nothing from another host
        assert http.get(asset).status_code == 200, asset
    assert "/v1/overview" in http.get("/static/status.js").text


def test_the_overview_shows_what_the_database_holds(
    seeded: None, http: httpx.Client, db: psycopg.Connection
) -> None:
    answer = http.get("/v1/overview", params={"minutes": 10})
    assert answer.status_code == 200, answer.text
    seen = answer.json()
    expected = expected_figures(db)
    assert seen["pending"] == expected["pending"]
    assert [b["messages"] for b in seen["age_buckets"]] == expected["by_bucket"]
    assert seen["oldest"][0]["transaction_id"] == expected["oldest_transaction_id"]
    assert seen["oldest_age_seconds"] >= 3 * 3600
    assert len(seen["minutes"]) == 10
    for state in ("committed", "rolled_back", "discarded", "expired"):
        assert sum(m[state] for m in seen["minutes"]) == expected[state]
    (billing,) = seen["consumers"]
    assert (billing["consumer_group"], billing["topic"]) == (BILLING, ORDERS)
    assert (billing["lag"], billing["in_flight"], billing["dead_letters"]) == (
        expected["lag"],
        expected["in_flight"],
        expected["dead_letters"],
    )
    assert {p["producer_group"]: p["live"] for p in seen["producers"]} == expected["live"]


@pytest.mark.parametrize("minutes", [0, 121, "many"])
def test_a_window_out_of_bounds_is_422(http: httpx.Client, minutes: object) -> None:
    answer = http.get("/v1/overview", params={"minutes": minutes})
    assert answer.status_code == 422 and answer.json()["error"]


def _scrape(http: httpx.Client, **headers: str) -> dict[tuple[str, tuple], float]:
    answer = http.get("/metrics", headers=headers)
    assert answer.status_code == 200, answer.text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def test_metrics_carry_the_database_gauges(
    seeded: None, http: httpx.Client, db: psycopg.Connection
) -> None:
    scraped = _scrape(http)
    expected = expected_figures(db)

    def gauge(name: str, **labels: str) -> float:
        return scraped[(name, tuple(sorted(labels.items())))]

    consumer = {"consumer_group": BILLING, "topic": ORDERS}
    assert gauge("coordinator_consumer_lag", **consumer) == expected["lag"] == 2
    assert gauge("coordinator_consumer_in_flight", **consumer) == expected["in_flight"] == 1
    assert gauge("coordinator_dead_letters", **consumer) == expected["dead_letters"] == 1
    orders = {"producer_group": ORDER_SVC, "topic": ORDERS}
    payments = {"producer_group": PAYMENT_SVC, "topic": PAYMENTS}
    assert gauge("coordinator_half_messages_outstanding", **orders) == 6
    assert gauge("coordinator_half_messages_outstanding", **payments) == 2
    assert 3 * 3600 <= gauge("coordinator_half_messages_oldest_age_seconds", **orders) < 4 * 3600
    assert 90 <= gauge("coordinator_half_messages_oldest_age_seconds", **payments) < 3600
    assert gauge("coordinator_producer_instances", producer_group=ORDER_SVC, live="true") == 1

    # Rebuilt at each scrape: what is gone vanishes.
    db.execute("DELETE FROM dead_letters")
    db.execute(
        "UPDATE messages SET state = 'rolled_back', resolved_at = now(), "
        "resolution_source = 'operator' WHERE producer_group = %s AND state = 'prepared'",
        (PAYMENT_SVC,),
    )
    scraped = _scrape(http)
    assert gauge("coordinator_dead_letters", **consumer) == 0
    assert ("coordinator_half_messages_outstanding", tuple(sorted(payments.items()))) not in scraped


# --- tokens ---------------------------------------------------------------------


@pytest.fixture
def tokens(issue_token: Callable[..., str]) -> dict[str, str]:
    return {
        "admin": issue_token("admin", admin=True),
        "metrics": issue_token("prometheus", metrics=True),
        "producer": issue_token(
            "producer", produce_topics=("orders",), producer_groups=("order-svc",)
        ),
    }


def test_with_tokens_the_page_is_open_and_its_figures_need_metrics_or_admin(
    database_url: str, settings: Settings, tokens: dict[str, str]
) -> None:
    with (
        LiveServer(database_url, settings) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        assert http.get("/").status_code == 200
        assert http.get("/static/status.js").status_code == 200
        refused = http.get("/v1/overview")
        assert refused.status_code == 401 and "needs a token" in refused.json()["message"]
        producer = http.get("/v1/overview", headers=_bearer(tokens["producer"]))
        assert producer.status_code == 403
        assert "needs the metrics permission" in producer.json()["message"]
        for who in ("metrics", "admin"):
            assert http.get("/v1/overview", headers=_bearer(tokens[who])).status_code == 200
    # metrics_open opens /metrics to scrapers, not the overview's transaction ids.
    with (
        LiveServer(database_url, settings.with_overrides(metrics_open=True)) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        assert http.get("/metrics").status_code == 200
        assert http.get("/v1/overview").status_code == 401


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


# --- /docs ------------------------------------------------------------------------


def test_api_docs_reference_only_the_coordinator(http: httpx.Client) -> None:
    page = http.get("/docs")
    assert page.status_code == 200
    assert not re.search(r"https?://", page.text), "the page names another host"
    assets = _assets(page.text)
    assert any(asset.endswith(".js") for asset in assets)
    for asset in assets:
        served = http.get(asset)
        assert served.status_code == 200 and served.content, asset
    assert http.get("/openapi.json").json()["paths"]["/v1/overview"]
    # FastAPI's /redoc would load ReDoc from a CDN (and its logo from another).
    assert http.get("/redoc").status_code == 404
