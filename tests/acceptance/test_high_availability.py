"""A PostgreSQL failover under load loses no acknowledged message, and its outage is bounded.

One Patroni cluster for the module (bench/ha_cluster.py: etcd and three
PostgreSQL 16 members in strict synchronous mode on loopback; Debian's
`patroni` and `etcd-server` are installed by the tests when missing) and one
coordinator node on it, HTTP and gRPC, whose database URL names every member.
Each scenario (bench/failover/scenarios.py) breaks the primary under
producers and consumers on both doors, and checks:

- every prepare and end answered 2xx holds on the new primary;
- each consumer group received every committed message, and nothing else;
- every answer in between was a 503 `database_unavailable` (gRPC:
  HA_NOT_AVAILABLE), and came within the deadline (no request hangs);
- producers went unacknowledged for no longer than the scenario's bound.

The broken member rejoins between scenarios. The coordinator is not
restarted: it follows every failover by itself.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from bench.failover.config import LoadConfig
from bench.failover.scenarios import FAULTS, ScenarioResult, run_scenario
from bench.ha_cluster import PatroniCluster, patroni_cluster
from bench.ha_proxy import RECIPE, haproxy_in_front
from bench.server import RunningServer, coordinator_process, free_port
from tests.system_packages import debian_program

pytestmark = pytest.mark.slow

DOCS = Path(__file__).resolve().parents[2] / "docs"

DEADLINE = 5.0  # database_deadline_seconds, the default
# What a loaded 2-core machine may add to an answer after the deadline.
SLACK = 5.0
CHECK_POLL_FALLBACK = 30.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[PatroniCluster]:
    patroni = debian_program("patroni", "patroni")
    etcd = debian_program("etcd", "etcd-server")
    with patroni_cluster(patroni=patroni, etcd=etcd) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def node(cluster: PatroniCluster) -> Iterator[tuple[RunningServer, int]]:
    grpc_port = free_port()
    with coordinator_process(
        cluster.url(),
        grpc_port=grpc_port,
        database_deadline_seconds=DEADLINE,
        # A check long poll is then answered early only when NOTIFY wakes
        # it, so the last test sees the listening connection follow too.
        check_poll_fallback_seconds=CHECK_POLL_FALLBACK,
        transaction_timeout_seconds=1,
        retention_interval_seconds=2,
    ) as server:
        yield server, grpc_port


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_failover_under_load_loses_no_acknowledged_message(
    cluster: PatroniCluster, node: tuple[RunningServer, int], fault: str
) -> None:
    server, grpc_port = node
    config = LoadConfig(
        http_url=server.url,
        grpc_target=f"127.0.0.1:{grpc_port}",
        topic=f"ha-{fault}",
        invisible_seconds=5.0,
    )
    result = run_scenario(cluster, FAULTS[fault], config)
    _report(result)
    verification = result.verification
    assert result.lost == 0, (verification.lost_prepares, verification.lost_ends)
    assert verification.ok, verification.problems
    assert verification.prepares_acked > 0 and verification.ends_acked > 0
    # The fault was felt and answered as unavailable, never as another error.
    assert not verification.refusals, verification.refusals
    assert result.longest_answer_seconds <= DEADLINE + SLACK, result.longest_answer_seconds
    assert result.longest_gap_seconds <= FAULTS[fault].outage_bound, result.longest_gap_seconds


def _report(result: ScenarioResult) -> None:
    """What the scenario measured, in the test's output (-s, or on failure)."""
    print(
        f"{result.fault}: {result.old_primary} -> {result.new_primary}, "
        f"outage {result.longest_gap_seconds:.1f} s, {result.answered_during} answered during it, "
        f"longest answer {result.longest_answer_seconds:.1f} s, "
        f"{result.verification.prepares_acked} prepares and "
        f"{result.verification.ends_acked} ends acknowledged, {result.lost} lost"
    )


def test_after_the_failovers_the_node_checks_back_wakes_long_polls_and_keeps_the_tables(
    cluster: PatroniCluster, node: tuple[RunningServer, int]
) -> None:
    """The node was not restarted: its check-back job claims on the new primary, the
    listening connection follows it (a check long poll is woken by NOTIFY, well before
    its polling fallback), and retention rounds run there."""
    server, _ = node
    cluster.wait_healthy()
    group, instance = "ha-checked", "after-failovers@1"
    with httpx.Client(base_url=server.url, timeout=60) as http:
        beat = http.post(f"/v1/producers/{group}/instances/{instance}/heartbeat", json={})
        assert beat.status_code == 200, beat.text
        started = _retention_started(http)
        prepared = http.post(
            "/v1/transactions",
            json={"topic": "ha-checks", "producer_group": group, "body_text": "left open"},
        )
        assert prepared.status_code == 201, prepared.text
        asked_at = time.monotonic()
        polled = http.get(
            f"/v1/producers/{group}/instances/{instance}/checks",
            params={"wait_seconds": 25},
        )
        waited = time.monotonic() - asked_at
        assert polled.status_code == 200, polled.text
        (check,) = polled.json()["checks"]
        assert check["transaction_id"] == prepared.json()["transaction_id"]
        # Due after 1 s, claimed within a scan (1 s), and the NOTIFY wakes the poll.
        assert waited < CHECK_POLL_FALLBACK / 2, waited
        answered = http.post(
            f"/v1/transactions/{check['transaction_id']}/end",
            json={"producer_group": group, "resolution": "commit", "from_check": True},
        )
        assert answered.status_code == 200, answered.text
        assert answered.json()["state"] == "committed"
        _until(lambda: _retention_started(http) > started, 30)


def _retention_started(http: httpx.Client) -> float:
    """When the node's last retention round started (unix seconds), from /metrics."""
    text = http.get("/metrics").text
    found = re.search(r'^coordinator_retention_last_round\{figure="started"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def test_the_documented_proxy_keeps_connections_off_a_primary_whose_patroni_died(
    cluster: PatroniCluster,
) -> None:
    """The recommended topology: HAProxy asking Patroni's REST API for the primary.

    A primary whose Patroni died still runs and takes writes; a multi-host URL
    may keep reaching it. Through the proxy no new connection does, and the
    promoted standby is reached once Patroni promoted it.
    """
    assert RECIPE in (DOCS / "high-availability.md").read_text(), "the docs show another recipe"
    program = debian_program("haproxy", "haproxy")
    primary = cluster.wait_healthy()
    with haproxy_in_front(cluster, program=program) as url:
        assert _reached(url) == (primary.pg_port, False)
        killed_at = time.monotonic()
        cluster.kill_patroni(primary)
        try:
            off_at = _until(lambda: _reached(url) != (primary.pg_port, False), 15)
            # It still runs and takes connections of its own: only the proxy keeps them off.
            assert cluster.execute(primary, "SELECT pg_is_in_recovery()") == [(False,)]
            new_at = _until(lambda: _writable_elsewhere(url, primary.pg_port), 60)
        finally:
            cluster.start_member(primary)
        cluster.wait_healthy()
    print(
        f"through haproxy: off the old primary after {off_at - killed_at:.1f} s, "
        f"writes on the new one after {new_at - killed_at:.1f} s"
    )


def _reached(url: str) -> tuple[int, bool] | None:
    """(port, in recovery) of the server a new connection through `url` reaches; None: none."""
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            row = conn.execute("SELECT inet_server_port(), pg_is_in_recovery()").fetchone()
    except psycopg.OperationalError:
        return None
    return None if row is None else (row[0], row[1])


def _writable_elsewhere(url: str, old_port: int) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2, autocommit=True) as conn:
            row = conn.execute("SELECT inet_server_port()").fetchone()
            conn.execute("CREATE TEMP TABLE proxied (n int); INSERT INTO proxied VALUES (1)")
    except psycopg.Error:
        return False
    return row is not None and row[0] != old_port


def _until(condition: Callable[[], bool], timeout: float) -> float:
    """When `condition` first held; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout:g} s"
        time.sleep(0.2)
    return time.monotonic()
