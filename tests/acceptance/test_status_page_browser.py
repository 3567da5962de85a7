"""The status page and /docs in a real headless Chromium, against a served coordinator.

The page must show what the database holds (read here with SQL of the
test's own), follow changes by itself, ask for a token when the server
needs one, and /docs must render with the network closed: every request
to a host other than the coordinator is refused, and none may be tried.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psycopg
import pytest

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.domain.states import Resolution
from tests.browser import browser  # noqa: F401
from tests.conftest import LiveServer
from tests.factories import end
from tests.overview_data import (
    BILLING,
    INSTANCE,
    ORDER_SVC,
    ORDERS,
    PAYMENT_SVC,
    RETENTION_OVERRIDES,
    STORED_TABLES,
    age_for_retention,
    expected_figures,
    expected_storage,
    overview_settings,
    seed,
)

WAIT_MS = 30_000


@pytest.fixture
def settings() -> Settings:
    return overview_settings()


def _aside(call: Callable[[], Any]) -> Any:
    """`call()` on a thread of its own: Playwright's sync API holds this thread's event loop,
    where asyncio.run cannot start another."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(call).result()


def _core_call(database_url: str, settings: Settings, call: Callable[[Coordinator], Any]) -> Any:
    async def run() -> Any:
        async with Coordinator.connect(database_url, settings) as core:
            return await call(core)

    return _aside(lambda: asyncio.run(run()))


@pytest.fixture
def seeded(database_url: str, db: psycopg.Connection, settings: Settings) -> None:
    _core_call(database_url, settings, lambda core: seed(core, db))


@pytest.fixture
def page_of(browser: Any) -> Iterator[Callable[[], Any]]:  # noqa: F811
    """New pages of one browser context, each failing the test on a script error."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []

    def new_page() -> Any:
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on(
            "console",
            lambda message: errors.append(message.text) if message.type == "error" else None,
        )
        return page

    try:
        yield new_page
    finally:
        context.close()
    # A refused token is answered 401/403, which Chromium logs as a failed resource.
    assert [e for e in errors if "status of 40" not in e] == []


def _text(page: Any, selector: str) -> str:
    return (page.locator(selector).first.text_content() or "").strip()


def _shows(page: Any, selector: str, text: str) -> None:
    page.wait_for_function(
        "([selector, text]) => document.querySelector(selector)?.textContent.trim() === text",
        arg=[selector, text],
    )


def test_the_page_shows_what_the_database_holds_and_follows_it(
    seeded: None,
    live_server: LiveServer,
    database_url: str,
    settings: Settings,
    db: psycopg.Connection,
    page_of: Callable[[], Any],
    tmp_path: Path,
) -> None:
    page = page_of()
    page.goto(f"{live_server.url}/?refresh=1")
    expected = expected_figures(db)
    _shows(page, "#pending-total", str(expected["pending"]))

    assert _text(page, "#oldest-age").startswith("3 h 00 min")
    buckets = [int(_text(page, f'#age-chart g[data-bucket="{i}"] text.count')) for i in range(6)]
    assert buckets == expected["by_bucket"]
    first = page.locator("#oldest tbody tr").first
    assert first.get_attribute("data-transaction-id") == expected["oldest_transaction_id"]
    assert first.locator("td.checks").inner_text() == str(expected["oldest_check_count"])
    for state in ("committed", "rolled_back", "discarded", "expired"):
        assert _text(page, f"#window-{state}") == str(expected[state]), state
    consumer = f'#consumers tr[data-consumer="{BILLING}/{ORDERS}"]'
    for field in ("lag", "in_flight", "dead_letters"):
        assert _text(page, f'{consumer} td[data-field="{field}"]') == str(expected[field]), field
    assert _text(page, "#lag-total") == str(expected["lag"])
    assert _text(page, "#dead-letters-total") == str(expected["dead_letters"])
    producers = f'#producers tr[data-group="{ORDER_SVC}"] td[data-field="live"]'
    assert _text(page, producers) == str(expected["live"][ORDER_SVC])
    waiting = f'#check-backs tr[data-group="{PAYMENT_SVC}"] td[data-field="no_producer"]'
    assert _text(page, waiting) == str(expected["check_statuses"]["no_producer"])
    assert page.locator("#rates-chart svg rect.committed").count() >= 1

    shot = tmp_path / "status-page.png"
    page.screenshot(path=str(shot), full_page=True)
    image = shot.read_bytes()
    assert image.startswith(b"\x89PNG\r\n\x1a\n") and len(image) > 10_000

    # The page reads again by itself: a commit and a heartbeat show without a reload.
    oldest = expected["oldest_transaction_id"]
    _core_call(
        database_url,
        settings,
        lambda core: core.transactions.end(end(oldest, Resolution.COMMIT, group=ORDER_SVC)),
    )
    _core_call(
        database_url,
        settings,
        lambda core: core.checkback.producers.heartbeat(PAYMENT_SVC, INSTANCE),
    )
    after = expected_figures(db)
    _shows(page, "#pending-total", str(after["pending"]))
    assert after["pending"] == expected["pending"] - 1
    _shows(page, "#window-committed", str(expected["committed"] + 1))
    _shows(page, f'#producers tr[data-group="{PAYMENT_SVC}"] td[data-field="live"]', "1")
    assert page.locator(f'#oldest tbody tr[data-transaction-id="{oldest}"]').count() == 0


def test_the_storage_panel_shows_the_tables_and_the_nodes_last_round(
    seeded: None, database_url: str, db: psycopg.Connection, page_of: Callable[[], Any]
) -> None:
    age_for_retention(db)  # the dead letter is past its retention, billing idle
    # The node's first round runs as it starts; the next one not within the test.
    settings = overview_settings(**RETENTION_OVERRIDES, retention_interval_seconds=3600)
    with LiveServer(database_url, settings) as server:
        page = page_of()
        page.goto(f"{server.url}/?refresh=1")
        _shows(page, "#removed-dead_letters", "1")
        assert _text(page, "#removed-messages") == "0"
        assert _text(page, "#last-round").startswith("started ")

        db.execute("ANALYZE dead_letters")  # the estimate after the round's delete
        expected = expected_storage(db)
        for table in STORED_TABLES:
            figures = expected["tables"][table]
            row = f'#tables tr[data-table="{table}"]'
            _shows(page, f'{row} td[data-field="rows"]', f"{figures['rows']:,}")
            bytes_cell = page.locator(f'{row} td[data-field="bytes"]')
            assert bytes_cell.get_attribute("data-bytes") == str(figures["bytes"]), table
            assert (bytes_cell.text_content() or "").endswith("KiB"), table
            assert page.locator(f"{row} td.bar svg rect").count() == 1
        assert _text(page, '#tables tr[data-table="dead_letters"] td[data-field="oldest_age"]') == (
            "empty"
        )
        assert _text(page, '#tables tr[data-table="messages"] td[data-field="oldest_age"]') != (
            "empty"
        )
        idle = f'#idle-groups tr[data-group="{BILLING}"] td[data-field="pending"]'
        assert _text(page, idle) == str(expected["billing_pending"])
        assert page.locator("#idle-groups-empty").is_hidden()


def test_the_page_asks_for_a_token_and_keeps_it_for_the_tab(
    seeded: None,
    database_url: str,
    settings: Settings,
    issue_token: Callable[..., str],
    page_of: Callable[[], Any],
    db: psycopg.Connection,
) -> None:
    producer = _aside(
        lambda: issue_token("producer", produce_topics=("*",), producer_groups=("*",))
    )
    metrics = _aside(lambda: issue_token("dashboard", metrics=True))
    with LiveServer(database_url, settings) as server:
        page = page_of()
        page.goto(f"{server.url}/status?refresh=1")
        page.locator("#token-form").wait_for(state="visible")
        assert "needs a token" in _text(page, "#token-reason")
        assert page.locator("#figures").is_hidden()

        page.fill("#token", producer)
        page.click("#token-form button")
        # A function, not an expression: Playwright evals a bare expression
        # inside the page, which the page's CSP (no 'unsafe-eval') may refuse.
        page.wait_for_function(
            "() => document.querySelector('#token-reason').textContent"
            ".includes('metrics permission')"
        )
        page.fill("#token", metrics)
        page.click("#token-form button")
        _shows(page, "#pending-total", str(expected_figures(db)["pending"]))
        assert page.locator("#token-form").is_hidden()
        assert page.evaluate("sessionStorage.getItem('coordinator-token')") == metrics

        page.reload()  # the tab keeps its token
        _shows(page, "#pending-total", str(expected_figures(db)["pending"]))
        page.click("#forget-token")
        page.locator("#token-form").wait_for(state="visible")


def test_api_docs_render_with_the_network_closed(
    live_server: LiveServer, page_of: Callable[[], Any]
) -> None:
    ours = urlparse(live_server.url).netloc
    elsewhere: list[str] = []

    def only_the_coordinator(route: Any) -> None:
        if urlparse(route.request.url).netloc == ours:
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page = page_of()
    page.route("**/*", only_the_coordinator)
    document = page.request.get(f"{live_server.url}/openapi.json").json()
    operations = sum(len(methods) for methods in document["paths"].values())

    page.goto(f"{live_server.url}/docs")
    page.locator(".opblock").nth(operations - 1).wait_for()
    assert page.locator(".opblock").count() == operations
    assert any(
        "/v1/overview" in text for text in page.locator(".opblock-summary").all_inner_texts()
    )
    assert elsewhere == []
