"""The example alert rules (docs/prometheus/alerts.yml), checked and tested with promtool.

The series promtool evaluates them on are taken from a real coordinator: it
is scraped while healthy, then driven into every condition the rules watch
(a half message nobody ends, pushed check-backs that fail until a discard,
a consumer group 1,001 messages behind, a dead letter) and scraped again.
The test input lays the two scrapes out over time, one sample a minute:
30 minutes as healthy, an hour as troubled (gauges as in the second scrape,
an age growing with the clock, counters going on growing by what they grew
between the scrapes), then an hour recovered (gauges as healthy, counters
still). Each alert must fire, with its labels, while troubled, and no alert
while healthy or after recovering.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bench.server import free_port
from tests.processes import coordinator_serve
from tests.scrape import Labels, Scrape, scrape
from tests.system_packages import debian_program

RULES = Path(__file__).resolve().parents[2] / "docs" / "prometheus" / "alerts.yml"
OPERATIONS = RULES.parents[1] / "operations.md"

HEALTHY, TROUBLED, RECOVERED = 30, 60, 60  # minutes of each phase
# Gauges that are an age: while troubled they grow with the clock.
AGES = {"coordinator_half_messages_oldest_age_seconds"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def promtool() -> str:
    return debian_program("promtool", "prometheus")


def test_promtool_accepts_the_rules(promtool: str) -> None:
    checked = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 5 rules found" in checked.stdout


def test_the_operations_page_shows_the_rules_file_as_it_is() -> None:
    page = OPERATIONS.read_text()
    section = page[page.index("### Alert rules") :]
    shown = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert shown is not None
    assert shown.group(1) == RULES.read_text()


def test_each_alert_fires_on_a_coordinator_in_trouble_and_only_then(
    promtool: str, database_url: str, tmp_path: Path
) -> None:
    with _coordinator(database_url, tmp_path) as (url, http):
        healthy = _healthy(url, http)
        troubled = _troubled(url, http)

    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    names = {name for rule in rules for name in re.findall(r"coordinator_\w+", rule["expr"])}
    series = _input_series(names, healthy, troubled)
    troubled_labels = {
        "CoordinatorHalfMessagesPendingTooLong": [{"producer_group": "stuck", "topic": "orders"}],
        "CoordinatorDiscardingHalfMessages": [{}],
        "CoordinatorCheckBackPushesFailing": [{}],
        "CoordinatorConsumerLagHigh": [{"consumer_group": "bulk", "topic": "events"}],
        "CoordinatorDeadLetters": [{"consumer_group": "fragile", "topic": "fragile-events"}],
    }
    assert {rule["alert"] for rule in rules} == troubled_labels.keys()
    checks = []
    # the last minute of each phase
    healthy_end, troubled_end = HEALTHY - 1, HEALTHY + TROUBLED - 1
    recovered_end = HEALTHY + TROUBLED + RECOVERED - 1
    for rule in rules:
        name = rule["alert"]
        firing = [_alert(rule, labels) for labels in troubled_labels[name]]
        checks += [
            {"eval_time": f"{healthy_end}m", "alertname": name, "exp_alerts": []},
            {"eval_time": f"{troubled_end}m", "alertname": name, "exp_alerts": firing},
            {"eval_time": f"{recovered_end}m", "alertname": name, "exp_alerts": []},
        ]
    unit_test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": checks}],
    }
    test_file = tmp_path / "alerts_test.yml"
    test_file.write_text(json.dumps(unit_test, indent=1))  # JSON is YAML
    tested = subprocess.run(
        [promtool, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=120
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


# --- driving a coordinator -----------------------------------------------------


@contextmanager
def _coordinator(database_url: str, workdir: Path) -> Iterator[tuple[str, httpx.Client]]:
    """`coordinator serve` in a process of its own (its counters start at 0)."""
    with (
        coordinator_serve(
            database_url,
            workdir,
            check_scan_interval_seconds=0.1,
            transaction_timeout_seconds=0.2,
            check_interval_seconds=0.2,
            check_max=1,
            check_push_timeout_seconds=2,
        ) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        yield server.url, http


def _ok(response: httpx.Response) -> dict[str, Any]:
    assert response.is_success, response.text
    return response.json() if response.content else {}


def _healthy(url: str, http: httpx.Client) -> Scrape:
    """Transactions flow: committed, delivered and acked."""
    _ok(http.put("/v1/consumer-groups/billing/subscriptions/orders", json={"expression": "*"}))
    sent = _ok(
        http.post(
            "/v1/transactions",
            json={"topic": "orders", "producer_group": "shop", "body_text": "order 1"},
        )
    )
    _ok(
        http.post(
            f"/v1/transactions/{sent['transaction_id']}/end",
            json={"producer_group": "shop", "resolution": "commit"},
        )
    )
    receive = {"max_messages": 16, "invisible_seconds": 30, "wait_seconds": 10}
    (received,) = _ok(http.post("/v1/consumer-groups/billing/receive", json=receive))["messages"]
    _ok(
        http.post(
            "/v1/consumer-groups/billing/ack", json={"receipt_handle": received["receipt_handle"]}
        )
    )
    return scrape(url)


def _troubled(url: str, http: httpx.Client) -> Scrape:
    # a half message of a producer group with no producer: pending, its checks waiting
    _ok(
        http.post(
            "/v1/transactions",
            json={"topic": "orders", "producer_group": "stuck", "body_text": "order 2"},
        )
    )
    # a push producer whose check URL answers nothing: its check fails, then the discard
    dead_url = f"http://127.0.0.1:{free_port()}/check"
    _ok(http.post("/v1/producers/flaky/instances/i-1/heartbeat", json={"check_url": dead_url}))
    unanswered = _ok(
        http.post(
            "/v1/transactions",
            json={"topic": "orders", "producer_group": "flaky", "body_text": "order 3"},
        )
    )
    _until(lambda: _ok(http.get(f"/v1/offsets/{unanswered['offset']}"))["state"] == "discarded")
    # a consumer group 1,001 messages behind
    _ok(http.put("/v1/consumer-groups/bulk/subscriptions/events", json={"expression": "*"}))
    for count in (1000, 1):
        batch = [{"topic": "events", "body_text": f"event {i}"} for i in range(count)]
        _ok(http.post("/v1/messages/batch", json={"messages": batch}))
    # a message out of delivery attempts: one, received and never acked
    _ok(
        http.put(
            "/v1/consumer-groups/fragile/subscriptions/fragile-events",
            json={"expression": "*", "max_delivery_attempts": 1},
        )
    )
    _ok(http.post("/v1/messages", json={"topic": "fragile-events", "body_text": "poison"}))
    receive = {"max_messages": 1, "invisible_seconds": 0.1, "wait_seconds": 10}
    assert _ok(http.post("/v1/consumer-groups/fragile/receive", json=receive))["messages"]

    def buried() -> bool:
        # Once its invisible duration is over, the next receive finds the delivery
        # out of attempts and moves it to the dead letters.
        _ok(http.post("/v1/consumer-groups/fragile/receive", json={**receive, "wait_seconds": 0}))
        return bool(_ok(http.get("/v1/consumer-groups/fragile/dead-letters"))["dead_letters"])

    _until(buried)
    return scrape(url)


def _until(done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not done():
        assert time.monotonic() < deadline, "the coordinator did not get there in 30 s"
        time.sleep(0.1)


# --- the promtool unit test -------------------------------------------------------


def _selector(name: str, labels: Labels) -> str:
    inner = ",".join(f'{key}="{value}"' for key, value in sorted(labels))
    return f"{name}{{{inner}}}"


def _input_series(names: set[str], healthy: Scrape, troubled: Scrape) -> list[dict[str, str]]:
    series = []
    for name in sorted(names):
        before, after = healthy.series(name), troubled.series(name)
        assert after, f"{name}: the troubled coordinator exposes no such series"
        counter = name.endswith("_total")
        for labels in sorted(before.keys() | after.keys(), key=sorted):
            values = _values(name, counter, before.get(labels), after.get(labels))
            series.append({"series": _selector(name, labels), "values": " ".join(values)})
    return series


def _values(name: str, counter: bool, healthy: float | None, troubled: float | None) -> list[str]:
    def show(value: float | None) -> str:
        return "_" if value is None else repr(float(value))

    values = [show(healthy)] * HEALTHY
    if counter:
        start, step = troubled or 0.0, (troubled or 0.0) - (healthy or 0.0)
        values += [show(start + minute * step) for minute in range(TROUBLED)]
        values += [show(start + (TROUBLED - 1) * step)] * RECOVERED
    else:
        step = 60.0 if name in AGES else 0.0
        values += [
            show(None if troubled is None else troubled + minute * step)
            for minute in range(TROUBLED)
        ]
        values += [show(healthy)] * RECOVERED
    return values


def _alert(rule: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """The alert promtool must find: the rule's labels and its annotations rendered."""

    def render(template: str) -> str:
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)

    return {
        "exp_labels": {**labels, **rule.get("labels", {})},
        "exp_annotations": {k: render(v) for k, v in rule.get("annotations", {}).items()},
    }
