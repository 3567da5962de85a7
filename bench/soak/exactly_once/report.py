"""The exactly-once run's result as a dict (the --json output) and as tables drawn from it."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from bench.soak.behaviors import Behavior
from bench.soak.exactly_once.engine import ExactlyOnceResult
from bench.soak.exactly_once.supervisor import CHECK_MODES
from bench.soak.report import coordinator_counts, print_outcome, run_table, unplanned_exits


def as_dict(result: ExactlyOnceResult) -> dict[str, Any]:
    verdict, tally, faults, kills = result.verdict, result.tally, result.faults, result.kills
    states = result.coordinator_states
    options = result.options
    return {
        "ok": verdict.ok,
        "exactly_once": True,
        "problems": list(verdict.problems),
        "run": result.run,
        "options": {
            "seconds": options.seconds,
            "producers": options.producers,
            "nodes": options.nodes,
            "consumers_per_group": options.consumers_per_group,
            "seed": options.seed,
            "postgres_faults": options.postgres_faults,
            "check_modes": list(CHECK_MODES[: options.producers]),
        },
        "settled": verdict.settled,
        "settle_seconds": round(result.settle_seconds, 1),
        "orders": {
            "begun": len(tally.begun),
            "committed_locally": verdict.committed,
            "rolled_back_locally": verdict.rolled_back_locally,
            "by_behavior": {b.value: tally.behaviors.get(b.value, 0) for b in Behavior},
            "prepare_failed": tally.prepare_failed,
        },
        "coordinator": coordinator_counts(states),
        "resolutions": dict(sorted(result.resolutions.items())),
        "settled_by_check": {
            "database": result.settled_by_database,
            "producer": result.settled_by_producer,
        },
        "check_backs_answered_by_producers": sum(tally.checks.values()),
        "check_sources_registered": dict(tally.check_sources),
        "most_checks_of_a_message": result.most_checks,
        "faults": {
            "producer_kills": result.supervision.producer_kills,
            "producer_kills_planned": kills.producers,
            "producer_groups_killed": kills.producer_groups,
            "consumer_kills": result.consumer_kills,
            "coordinator_kills": faults.coordinator_kills,
            "postgres_restarts": faults.postgres_restarts,
            "postgres_crashes": faults.postgres_crashes,
        },
        "unplanned_exits": unplanned_exits(result.supervision),
        "groups": {
            group.group: {
                "deliveries": tally.deliveries[group.group],
                **{k: tally.outcomes[group.group][k] for k in _OUTCOME_KEYS},
                "skipped_by_inbox": tally.skipped(group.group),
                "order_rows": group.rows,
                "orders": group.orders,
                "missing": len(group.missing),
                "duplicated": len(group.duplicated),
                "unexpected": len(group.unexpected),
                "rolled_back_written": len(group.rolled_back),
                "wrong_amount": len(group.wrong_amount),
            }
            for group in verdict.groups
        },
        "stuck_prepared": len(verdict.stuck_prepared),
        "events": result.events,
    }


_OUTCOME_KEYS = ("handled", "handled_unacked", "skipped", "skipped_unacked", "failed", "error")


def print_report(report: dict[str, Any], console: Console) -> None:
    options = report["options"]
    title = (
        f"exactly-once soak {report['run']}: {options['seconds']:g} s, "
        f"{options['producers']} producers, {options['nodes']} nodes, "
        f"{options['consumers_per_group']} consumers per group, seed {options['seed']}"
    )
    run = run_table(title)
    orders = report["orders"]
    run.add_row("orders begun", f"{orders['begun']:,}")
    run.add_row("  committed locally (the producers' truth)", f"{orders['committed_locally']:,}")
    run.add_row("  rolled back locally (or never sent)", f"{orders['rolled_back_locally']:,}")
    run.add_row("  half message refused by every node", f"{orders['prepare_failed']:,}")
    for state, count in report["coordinator"].items():
        run.add_row(f"coordinator: {state.replace('_', ' ')}", f"{count:,}")
    for how, count in report["resolutions"].items():
        run.add_row(f"  {how.replace('_', ' ')}", f"{count:,}")
    by_check = report["settled_by_check"]
    run.add_row("settled by the database check source", f"{by_check['database']:,}")
    run.add_row("settled by a producer's check-back answer", f"{by_check['producer']:,}")
    faults = report["faults"]
    run.add_row(
        "producers killed (of which by the plan; whole groups)",
        f"{faults['producer_kills']:,} ({faults['producer_kills_planned']}; "
        f"{faults['producer_groups_killed']})",
    )
    run.add_row("consumers killed", f"{faults['consumer_kills']:,}")
    run.add_row("coordinator nodes killed", f"{faults['coordinator_kills']:,}")
    run.add_row(
        "postgres restarts",
        f"{faults['postgres_restarts']:,} ({faults['postgres_crashes']} immediate)"
        if options["postgres_faults"]
        else "- (not asked for)",
    )
    print_outcome(
        report,
        console,
        run,
        {
            "deliveries": "deliveries",
            "handled": "handler ran, committed, acked",
            "handled_unacked": "handler ran, committed, left unacked",
            "failed": "handler failed (rolled back)",
            "skipped_by_inbox": "redeliveries skipped by the inbox",
            "error": "errors on the way",
            "order_rows": "order rows written",
            "missing": "missing",
            "duplicated": "written twice",
            "unexpected": "not committed, yet written",
            "wrong_amount": "wrong amount",
        },
        f"every consumer group wrote exactly the {orders['committed_locally']:,} "
        "locally committed orders, each once",
    )
