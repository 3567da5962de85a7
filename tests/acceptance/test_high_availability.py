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

from collections.abc import Iterator

import pytest

from bench.failover.config import LoadConfig
from bench.failover.scenarios import FAULTS, ScenarioResult, run_scenario
from bench.ha_cluster import PatroniCluster, patroni_cluster
from bench.server import RunningServer, coordinator_process, free_port
from tests.system_packages import debian_program

pytestmark = pytest.mark.slow

DEADLINE = 5.0  # database_deadline_seconds, the default
# What a loaded 2-core machine may add to an answer after the deadline.
SLACK = 5.0


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
        cluster.url(), grpc_port=grpc_port, database_deadline_seconds=DEADLINE
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
