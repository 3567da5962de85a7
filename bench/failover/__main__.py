"""Failovers under load, and what synchronous replication costs.

    python -m bench.failover                         # every scenario, a table
    python -m bench.failover --scenario cut_wait     # one (repeat the flag for more)
    python -m bench.failover --source ../old-tree --url-form query
                                                     # the coordinator of another checkout
    python -m bench.failover --through haproxy       # the coordinator's URL names HAProxy
    python -m bench.failover --sync-cost             # throughput with and without the standby
    python -m bench.failover --json                  # the figures for scripts

It starts a Patroni cluster of three PostgreSQL members on loopback
(bench/ha_cluster.py: Debian's `patroni` and `etcd-server` must be
installed), one coordinator node on it (HTTP and gRPC, the database URL
naming every member), and runs each scenario (bench/failover/scenarios.py)
under producers and consumers on both doors. Per scenario it prints the
outage (the longest time producers went without a 2xx), the requests
answered during it, the longest any request waited for an answer, and
what was acknowledged and lost: the number that must be 0.

--sync-cost measures single-message throughput (bench.http_load, one
message per call) against the same cluster in alternating rounds with the
coordinator's `synchronous_commit` at `on` (a commit waits for the
synchronous standby) and `local` (it does not): the ratio is what
synchronous replication costs, in the same run on the same machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

from bench.failover.config import LoadConfig
from bench.failover.scenarios import FAULTS, ScenarioResult, run_scenario
from bench.ha_cluster import PatroniCluster, patroni_cluster
from bench.ha_proxy import haproxy_in_front
from bench.http_load import run_single
from bench.server import coordinator_process, coordinator_server, free_port

console = Console(stderr=True)


def run_scenarios(
    cluster: PatroniCluster,
    names: Sequence[str],
    *,
    source: Path | None = None,
    url_form: Literal["hosts", "query"] = "hosts",
    through: Literal["url", "haproxy"] = "url",
) -> list[ScenarioResult]:
    """Each named scenario in turn, on one coordinator node that follows every failover."""
    grpc_port = free_port()
    results = []
    with ExitStack() as stack:
        url = (
            stack.enter_context(haproxy_in_front(cluster))
            if through == "haproxy"
            else cluster.url(form=url_form)
        )
        server = stack.enter_context(coordinator_process(url, source=source, grpc_port=grpc_port))
        for name in names:
            config = LoadConfig(
                http_url=server.url,
                grpc_target=f"127.0.0.1:{grpc_port}",
                topic=f"failover-{name}",
                invisible_seconds=5.0,
            )
            results.append(
                run_scenario(cluster, FAULTS[name], config, progress=lambda line: console.log(line))
            )
    return results


def sync_cost(
    cluster: PatroniCluster, *, rounds: int, seconds: float, producers: int
) -> dict[str, Any]:
    """Messages per second with synchronous_commit on and local, in alternating rounds."""
    rates: dict[str, list[float]] = {"on": [], "local": []}
    for round_number in range(rounds):
        for level in ("on", "local") if round_number % 2 == 0 else ("local", "on"):
            with coordinator_server(cluster.url(), synchronous_commit=level) as url:
                result = run_single(url, concurrency=producers, seconds=seconds)
            rates[level].append(result.messages_per_second)
            console.log(f"synchronous_commit={level}: {result.messages_per_second:.0f} msgs/s")
    on, local = statistics.median(rates["on"]), statistics.median(rates["local"])
    return {
        "producers": producers,
        "seconds_per_round": seconds,
        "rounds": rates,
        "median_on": on,
        "median_local": local,
        "on_vs_local": on / local if local else None,
    }


def result_figures(result: ScenarioResult) -> dict[str, Any]:
    verification = result.verification
    return {
        "scenario": result.fault,
        "old_primary": result.old_primary,
        "new_primary": result.new_primary,
        "outage_seconds": round(result.longest_gap_seconds, 2),
        "recovered_after_seconds": _rounded(result.outage.recovered_after),
        "answered_during_outage": result.answered_during,
        "longest_answer_seconds": round(result.longest_answer_seconds, 2),
        "prepares_acknowledged": verification.prepares_acked,
        "ends_acknowledged": verification.ends_acked,
        "acknowledged_and_lost": result.lost,
        "left_prepared": len(verification.left_prepared),
        "committed": verification.committed,
        "problems": list(verification.problems),
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def print_table(figures: list[dict[str, Any]]) -> None:
    table = Table(title="Failovers under load (one coordinator node, HTTP and gRPC)")
    for column in (
        "scenario",
        "primary",
        "outage s",
        "answered during",
        "longest answer s",
        "prepares / ends acked",
        "acked and lost",
        "problems",
    ):
        table.add_column(column, justify="left" if column in ("scenario", "problems") else "right")
    for row in figures:
        table.add_row(
            row["scenario"],
            f"{row['old_primary']} → {row['new_primary']}",
            f"{row['outage_seconds']:.1f}",
            str(row["answered_during_outage"]),
            f"{row['longest_answer_seconds']:.1f}",
            f"{row['prepares_acknowledged']} / {row['ends_acknowledged']}",
            str(row["acknowledged_and_lost"]),
            # The sentences without their lists of ids (--json has them whole).
            "; ".join(problem.split(" (")[0] for problem in row["problems"]) or "none",
        )
    Console(width=150).print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--scenario", action="append", choices=list(FAULTS), help="default: every scenario"
    )
    parser.add_argument("--source", type=Path, help="run the coordinator of this checkout")
    parser.add_argument(
        "--url-form",
        choices=["hosts", "query"],
        default="hosts",
        help="the members in the URL's authority (h1:p1,h2:p2) or as host=/port= lists",
    )
    parser.add_argument(
        "--through",
        choices=["url", "haproxy"],
        default="url",
        help="the coordinator reaches the members through its URL, or through HAProxy "
        "(the recipe of docs/high-availability.md)",
    )
    parser.add_argument("--sync-cost", action="store_true", help="measure the standby's cost")
    parser.add_argument("--sync-rounds", type=int, default=4)
    parser.add_argument("--sync-seconds", type=float, default=10.0)
    parser.add_argument("--sync-producers", type=int, default=16)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    report: dict[str, Any] = {}
    with patroni_cluster() as cluster:
        if args.sync_cost:
            report["sync_cost"] = sync_cost(
                cluster,
                rounds=args.sync_rounds,
                seconds=args.sync_seconds,
                producers=args.sync_producers,
            )
        if args.scenario or not args.sync_cost:
            names = args.scenario or list(FAULTS)
            results = run_scenarios(
                cluster, names, source=args.source, url_form=args.url_form, through=args.through
            )
            report["scenarios"] = [result_figures(result) for result in results]
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        if "scenarios" in report:
            print_table(report["scenarios"])
        if "sync_cost" in report:
            cost = report["sync_cost"]
            Console().print(
                f"synchronous standby: {cost['median_on']:.0f} msgs/s, without waiting for it: "
                f"{cost['median_local']:.0f} msgs/s (ratio {cost['on_vs_local']:.2f}, "
                f"{cost['producers']} producers, median of {args.sync_rounds} rounds each)"
            )
    lost = sum(row["acknowledged_and_lost"] for row in report.get("scenarios", []))
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
