"""Check URLs that attack the coordinator, against served coordinators.

A check URL is the producer's: it may answer a huge body or a gzip bomb to
exhaust the coordinator's memory, or name (in an IPv6 spelling) an address
the coordinator must not call. The memory attacks are measured on the
peak resident memory of a `coordinator serve` process; the answers are
failed pushes: the message stays prepared, its check counted and its
failure recorded and logged with a sentence.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from coordinator.config import Settings
from tests.checkback_helpers import check_request, check_settings
from tests.conftest import LiveServer
from tests.factories import TOPIC
from tests.hostile_check_url import HostileCheckUrl
from tests.processes import ServeProcess, coordinator_serve
from tests.push_receiver import PushReceiver

MIB = 1024 * 1024
# A coordinator holding a whole answer grows by hundreds of MiB (the answer,
# inflated, and its text); one reading within 64 KiB by about nothing.
MEMORY_GROWTH_BOUND = 50 * MIB
ATTACKS = ("/declared", "/undeclared", "/gzip")
METADATA_FORMS = {
    "::ffff:169.254.169.254": "IPv4-mapped",
    "::169.254.169.254": "IPv4-compatible",
    "64:ff9b::169.254.169.254": "NAT64",
    "64:ff9b:1::169.254.169.254": "local-use NAT64",
    "2002:a9fe:a9fe::": "6to4",
}


def _eventually(probe: Callable[[], Any], what: str, seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while not (result := probe()):
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.1)
    return result


def _prepare(http: httpx.Client, group: str) -> dict[str, Any]:
    sent = http.post(
        "/v1/transactions", json={"topic": TOPIC, "producer_group": group, "body_text": "order"}
    )
    assert sent.status_code == 201, sent.text
    return sent.json()


def _register(http: httpx.Client, group: str, url: str) -> httpx.Response:
    return http.post(f"/v1/producers/{group}/instances/i-1/heartbeat", json={"check_url": url})


def _pushed(db: psycopg.Connection, offset: int) -> dict[str, Any] | None:
    """The message's check request once its push is done (delivered or failed), else None."""
    request = check_request(db, offset)
    done = request is not None and request["status"] in ("delivered", "failed")
    return request if done else None


# --- Memory: answers too large to hold --------------------------------------------


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc status")


def _reset_peak_rss(pid: int) -> None:
    # Linux: "5" resets the peak to the current resident size; without it the
    # peak of the start (imports, migrations) could hide a later growth, and
    # the test would only pass more easily, never fail wrongly.
    with suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


@pytest.fixture
def served(database_url: str, tmp_path: Path) -> Iterator[ServeProcess]:
    with coordinator_serve(
        database_url,
        tmp_path,
        global_args=["-v"],
        log_format="text",
        check_scan_interval_seconds=0.1,
        transaction_timeout_seconds=0.2,
        check_interval_seconds=600,  # one push per message in this test
    ) as server:
        yield server


@pytest.mark.slow
def test_huge_answers_and_gzip_bombs_are_failed_pushes_that_take_no_memory(
    served: ServeProcess, db: psycopg.Connection
) -> None:
    pid = served.process.pid
    with HostileCheckUrl() as hostile, httpx.Client(base_url=served.url, timeout=30) as http:
        # a push that works first, so what every push loads is loaded before the measure
        assert _register(http, "warm-up", hostile.base + "/ok").status_code == 200
        warm = _prepare(http, "warm-up")
        _eventually(
            lambda: http.get(f"/v1/offsets/{warm['offset']}").json()["state"] == "committed",
            "the warm-up push commits",
        )
        _reset_peak_rss(pid)
        before = _peak_rss(pid)

        sent = {}
        for path in ATTACKS:
            group = "hostile" + path.replace("/", "-")
            assert _register(http, group, hostile.base + path).status_code == 200
            sent[path] = _prepare(http, group)
        pushed = {
            path: _eventually(lambda m=message: _pushed(db, m["offset"]), f"{path} pushed")
            for path, message in sent.items()
        }
        grown = _peak_rss(pid) - before
        states = {p: http.get(f"/v1/offsets/{m['offset']}").json() for p, m in sent.items()}

    assert grown < MEMORY_GROWTH_BOUND, f"the server's peak memory grew by {grown / MIB:.0f} MiB"
    assert {path: hostile.received(path) for path in ATTACKS} == dict.fromkeys(ATTACKS, 1)
    assert {path: request["status"] for path, request in pushed.items()} == dict.fromkeys(
        ATTACKS, "failed"
    )
    for message in states.values():
        assert (message["state"], message["check_count"]) == ("prepared", 1), message
    bound = "more than 65536 bytes (max_check_answer_bytes); not read further"
    assert pushed["/declared"]["detail"] == (
        f"the check URL's answer declares {128 * MIB} bytes, {bound}"
    )
    assert pushed["/undeclared"]["detail"] == f"the check URL's answer has {bound}"
    assert pushed["/gzip"]["detail"] == f"the check URL's answer inflates (gzip) to {bound}"
    log = served.output()
    for path, message in sent.items():
        assert (
            f"check-back of transaction {message['transaction_id']} to {hostile.base}{path} "
            f"failed: {pushed[path]['detail']}"
        ) in log


# --- Addresses: IPv6 spellings of forbidden IPv4 addresses ---------------------------


@pytest.fixture
def settings() -> Settings:
    return check_settings(
        check_scheduler_enabled=True,
        check_scan_interval_seconds=0.1,
        transaction_timeout_seconds=0.2,
        check_interval_seconds=600,
        check_push_timeout_seconds=1.0,
    )


@pytest.fixture
def http(live_server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_server.url, timeout=30) as client:
        yield client


def test_check_urls_naming_forbidden_addresses_in_ipv6_forms_are_refused_at_registration(
    http: httpx.Client,
) -> None:
    answers = {
        address: _register(http, "shop", f"http://[{address}]:8080/check")
        for address in METADATA_FORMS
    }
    assert {a: r.status_code for a, r in answers.items()} == dict.fromkeys(METADATA_FORMS, 400)
    for address, form in METADATA_FORMS.items():
        message = answers[address].json()["message"]
        assert message.startswith("check URL address ") and message.endswith(
            f"is link-local, where cloud instance metadata services live "
            f"({form} form of 169.254.169.254); the coordinator does not call it"
        ), message
    assert http.get("/v1/producers").json() == {"producers": [], "check_sources": []}


def test_a_check_url_registered_before_the_rules_is_checked_again_before_each_push(
    http: httpx.Client, db: psycopg.Connection
) -> None:
    with PushReceiver() as receiver:
        sent = {}
        for number, address in enumerate(METADATA_FORMS):
            group = f"old-{number}"
            assert _register(http, group, receiver.url).status_code == 200
            # as a coordinator without these rules let it register
            db.execute(
                "UPDATE producers SET check_url = %s WHERE producer_group = %s",
                (f"http://[{address}]/check", group),
            )
            sent[address] = _prepare(http, group)
        pushed = {
            address: _eventually(lambda m=message: _pushed(db, m["offset"]), address)
            for address, message in sent.items()
        }
    assert receiver.received == []
    refused = "check URL resolves to a forbidden address"
    not_sent = {
        a: r["status"] == "failed" and r["detail"].startswith(refused) for a, r in pushed.items()
    }
    assert not_sent == dict.fromkeys(METADATA_FORMS, True), pushed
    for address, form in METADATA_FORMS.items():
        detail = pushed[address]["detail"]
        shown = ipaddress.ip_address(address)
        assert detail.startswith(f"check URL resolves to a forbidden address {shown} (link-local")
        assert detail.endswith(f"({form} form of 169.254.169.254)); not sent")
        record = http.get(f"/v1/offsets/{sent[address]['offset']}").json()
        assert (record["state"], record["check_count"]) == ("prepared", 1)


# --- Time: an answer that never ends -------------------------------------------------


def test_an_answer_trickling_in_is_a_failed_push_at_the_push_timeout(
    http: httpx.Client, db: psycopg.Connection
) -> None:
    # A byte every 0.2 s never trips a timeout per read; the push's own does.
    with HostileCheckUrl() as hostile:
        assert _register(http, "slow", hostile.base + "/trickle").status_code == 200
        sent = _prepare(http, "slow")
        pushed = _eventually(lambda: _pushed(db, sent["offset"]), "the push ends", seconds=20)
    assert (pushed["status"], pushed["detail"]) == (
        "failed",
        "no whole answer from the check URL within 1 s (check_push_timeout_seconds)",
    )
    record = http.get(f"/v1/offsets/{sent['offset']}").json()
    assert (record["state"], record["check_count"]) == ("prepared", 1)
