"""The soak's result as a dict (the --json output) and as tables drawn from that dict."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.soak.behaviors import Behavior
from bench.soak.engine import SoakResult
from bench.soak.supervisor import Supervision

COORDINATOR_STATES = ("committed", "rolled_back", "discarded", "expired", "prepared")


def as_dict(result: SoakResult) -> dict[str, Any]:
    verdict, tally, faults = result.verdict, result.tally, result.faults
    states = result.coordinator_states
    return {
        "ok": verdict.ok,
        "problems": list(verdict.problems),
        "run": result.run,
        "options": {
            "seconds": result.options.seconds,
            "producers": result.options.producers,
            "nodes": result.options.nodes,
            "seed": result.options.seed,
        },
        "settled": verdict.settled,
        "settle_seconds": round(result.settle_seconds, 1),
        "transactions": {
            "total": tally.transactions,
            "by_behavior": {b.value: tally.behaviors.get(b.value, 0) for b in Behavior},
            "prepare_failed": tally.prepare_failed,
        },
        "local_commits": result.local_commits,
        "coordinator": coordinator_counts(states),
        "resolutions": dict(sorted(result.resolutions.items())),
        "check_backs_answered": sum(tally.checks.values()),
        "most_checks_of_a_message": result.most_checks,
        "faults": {
            "producer_kills": result.supervision.producer_kills,
            "coordinator_kills": faults.coordinator_kills,
            "postgres_restarts": faults.postgres_restarts,
            "postgres_crashes": faults.postgres_crashes,
            "postgres_restarts_possible": result.postgres_restarts_possible,
        },
        "unplanned_exits": unplanned_exits(result.supervision),
        "groups": {
            group.group: {
                "deliveries": group.deliveries,
                "distinct": group.distinct,
                "duplicates": group.duplicates,
                "duplicates_after_ack": len(group.unexpected_duplicates),
                "lost": len(group.lost),
                "unexpected": len(group.unexpected),
                "dead_letters": len(group.dead_letters),
            }
            for group in verdict.groups
        },
        "stuck_prepared": len(verdict.stuck_prepared),
        "events": result.events,
    }


def coordinator_counts(states: Mapping[str, int]) -> dict[str, int]:
    """The run's messages by coordinator state, every state named even when none is in it."""
    return {state: states.get(state, 0) for state in COORDINATOR_STATES}


def unplanned_exits(supervision: Supervision) -> dict[str, int]:
    return {
        "producers": supervision.producer_exits,
        "nodes": supervision.node_exits,
        "consumers": supervision.consumer_exits,
    }


def run_table(title: str) -> Table:
    """The report's first table: one row per count of the run."""
    run = Table(title=title, show_header=False, title_justify="left")
    run.add_column("what")
    run.add_column("count", justify="right")
    return run


def print_report(report: dict[str, Any], console: Console) -> None:
    options = report["options"]
    title = (
        f"consistency soak {report['run']}: {options['seconds']:g} s, "
        f"{options['producers']} producers, {options['nodes']} nodes, seed {options['seed']}"
    )
    run = run_table(title)
    transactions = report["transactions"]
    run.add_row("transactions", f"{transactions['total']:,}")
    for behavior, count in transactions["by_behavior"].items():
        run.add_row(f"  {behavior.replace('_', ' ')}", f"{count:,}")
    run.add_row("  half message refused by every node", f"{transactions['prepare_failed']:,}")
    run.add_row("local commits (the producers' truth)", f"{report['local_commits']:,}")
    for state, count in report["coordinator"].items():
        run.add_row(f"coordinator: {state.replace('_', ' ')}", f"{count:,}")
    for how, count in report["resolutions"].items():
        run.add_row(f"  resolved by {how.replace('_', ' ')}", f"{count:,}")
    run.add_row("check-backs answered", f"{report['check_backs_answered']:,}")
    faults = report["faults"]
    run.add_row("producer kills", f"{faults['producer_kills']:,}")
    run.add_row("coordinator kills", f"{faults['coordinator_kills']:,}")
    restarts = f"{faults['postgres_restarts']:,} ({faults['postgres_crashes']} immediate)"
    if not faults["postgres_restarts_possible"]:
        restarts = "- (external database)"
    run.add_row("postgres restarts", restarts)
    print_outcome(
        report,
        console,
        run,
        {
            "deliveries": "deliveries",
            "distinct": "distinct messages",
            "duplicates": "duplicates delivered",
            "duplicates_after_ack": "  of which after an ack",
            "lost": "lost",
            "unexpected": "unexpected",
            "dead_letters": "dead letters",
        },
        f"every consumer group got exactly the {report['local_commits']:,} messages "
        "whose local transaction committed",
    )


def print_outcome(
    report: dict[str, Any], console: Console, run: Table, labels: dict[str, str], ok: str
) -> None:
    """The end both soaks' reports share: exits and settling, then per group, then the verdict.

    `run` is the table of the run so far; `labels` names the per-group
    counts to show, in order; `ok` is the sentence after OK.
    """
    exits = report["unplanned_exits"]
    run.add_row(
        "unplanned exits: producers / nodes / consumers",
        f"{exits['producers']} / {exits['nodes']} / {exits['consumers']}",
    )
    run.add_row("settled in", f"{report['settle_seconds']:.1f} s")
    console.print(run)

    groups = Table(title="per consumer group", title_justify="left")
    groups.add_column("")
    for name in report["groups"]:
        groups.add_column(name, justify="right")
    for key, label in labels.items():
        groups.add_row(label, *(f"{g[key]:,}" for g in report["groups"].values()))
    console.print(groups)

    if report["ok"]:
        console.print(f"[green]OK[/green]: {ok}")
    else:
        console.print("[red]FAILED[/red]:")
        for problem in report["problems"]:
            console.print(f"  {problem}", highlight=False, soft_wrap=True)
