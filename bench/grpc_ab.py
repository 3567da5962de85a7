"""Compare the gRPC door at two revisions, in one run: throughput and CPU per message.

    python -m bench.grpc_ab --base main                    # the working tree against main
    python -m bench.grpc_ab --base main --candidate HEAD   # two commits
    python -m bench.grpc_ab --base HEAD --quick            # a short smoke run

`bench.ab`'s method with `bench.grpc_load`'s load: each side (a temporary git
worktree of a revision, or a directory) serves the same database with its
gRPC door on, in an order that alternates each round; every round also
measures pgbench with as many clients and the grpc.aio floor
(`bench/grpc_floor.py`) with as many producers. A run on a shared, noisy
machine is read through what drifts least: the CPU each process spent per
message (`bench/cpu.py`) and the ratios within each round, summarised by
their medians over the rounds.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from rich.table import Table

from bench.ab import (
    SIDES,
    WORKING_TREE,
    Side,
    _rate,
    _spread,
    compare_revisions,
    console,
    side_databases,
)
from bench.baseline import run_baseline
from bench.cpu import CpuMeter, per_message, postmaster_pid
from bench.database import bench_database
from bench.grpc_floor import floor_server
from bench.grpc_load import run_grpc_single, subscribe
from bench.run import RESULTS, load_figures
from bench.server import coordinator_process, free_port

# The CPU figures a summary carries, per side (µs per message, and transactions).
CPU_FIGURES = ("server_us", "server_main_us", "postgres_us", "pg_write_transactions_per_message")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, help="the revision to compare against")
    parser.add_argument(
        "--candidate",
        default=str(WORKING_TREE),
        help="a revision, or the directory of a checkout (default: this working tree)",
    )
    parser.add_argument("--rounds", type=int, default=4, help="each side runs once per round")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each load run")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--quick", action="store_true", help="1 round of 2 s runs, 16 producers")
    parser.add_argument("--out", type=Path, default=RESULTS / "grpc_ab.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds, args.concurrency = 1, 2.0, [16]
    return compare_revisions(args, _compare, _print_table)


def _compare(base: Side, candidate: Side, args: argparse.Namespace) -> dict:
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    sides = {"base": base, "candidate": candidate}
    console.print(f"base: {base.describe()}, candidate: {candidate.describe()}")
    rounds = []
    with bench_database(None) as database, side_databases(database, sides) as urls:
        postmaster = postmaster_pid(database.url)
        for number in range(1, args.rounds + 1):
            order = SIDES if number % 2 else SIDES[::-1]
            measured: dict = {"round": number, "order": list(order), "baseline": [], "floor": []}
            for clients in args.concurrency:
                result = run_baseline(database, clients=clients, seconds=args.seconds)
                measured["baseline"].append(asdict(result))
                _print(number, "pgbench", clients, result.messages_per_second)
                with floor_server() as (pid, endpoint):
                    meter = CpuMeter(pid, None)
                    before = meter.snapshot()
                    load = run_grpc_single(endpoint, concurrency=clients, seconds=args.seconds)
                    cpu = per_message(before, meter.snapshot(), load.messages)
                measured["floor"].append(load_figures(load) | {"cpu_per_message": cpu})
                _print(number, "floor", clients, load.messages_per_second, cpu)
            for name in order:
                measured[name] = _measure_side(urls[name], postmaster, sides[name], number, args)
            rounds.append(measured)
    return {
        "started_at": started_at,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {k: str(v) for k, v in vars(args).items()},
        "sides": {
            name: {"asked": side.asked, "commit": side.commit, "changes": side.uncommitted_changes}
            for name, side in sides.items()
        },
        "rounds": rounds,
        "summary": _summary(rounds, args.concurrency),
    }


def _measure_side(
    database_url: str, postmaster: int | None, side: Side, number: int, args: argparse.Namespace
) -> list[dict]:
    """One side's runs of a round, on a gRPC server of its own, stopped at the end."""
    runs = []
    port = free_port()
    with coordinator_process(database_url, source=side.tree, grpc_port=port) as server:
        subscribe(server.url)
        meter = CpuMeter(server.process.pid, postmaster, database_url)
        for producers in args.concurrency:
            before = meter.snapshot()
            load = run_grpc_single(f"127.0.0.1:{port}", concurrency=producers, seconds=args.seconds)
            cpu = per_message(before, meter.snapshot(), load.messages)
            runs.append({"producers": producers} | load_figures(load) | {"cpu_per_message": cpu})
            _print(number, side.name, producers, load.messages_per_second, cpu)
    return runs


def _print(number: int, who: str, producers: int, rate: float, cpu: dict | None = None) -> None:
    spent = ""
    if cpu:
        spent = f", server {cpu['server_us']:,.0f} µs/msg"
        if "postgres_us" in cpu:
            spent += f", Postgres {cpu['postgres_us']:,.0f} µs/msg"
    console.print(f"round {number}, {who}, {producers}: {rate:,.0f} msgs/s{spent}")


def _summary(rounds: list[dict], concurrency: list[int]) -> list[dict]:
    """Per concurrency: rates, their ratios to the floor and to pgbench of the same round,
    candidate/base, and each side's CPU per message (medians, minima, maxima)."""
    rows = []
    for index, producers in enumerate(concurrency):
        baseline = [r["baseline"][index]["messages_per_second"] for r in rounds]
        floor = [r["floor"][index]["messages_per_second"] for r in rounds]
        row: dict = {
            "producers": producers,
            "baseline": _spread(baseline),
            "floor": _spread(floor),
            # The most any door on grpc.aio could reach against pgbench here: the
            # floor does no work at all, on the same cores and load generator.
            "floor_vs_baseline": _spread([f / b for f, b in zip(floor, baseline, strict=True)]),
            "floor_server_us": _spread(
                [r["floor"][index]["cpu_per_message"]["server_us"] for r in rounds]
            ),
        }
        rates = {name: [r[name][index]["messages_per_second"] for r in rounds] for name in SIDES}
        for name in SIDES:
            cpu = [r[name][index]["cpu_per_message"] or {} for r in rounds]
            row[name] = _spread(rates[name]) | {
                "vs_floor": _spread([s / f for s, f in zip(rates[name], floor, strict=True)]),
                "vs_baseline": _spread([s / b for s, b in zip(rates[name], baseline, strict=True)]),
                "cpu": {
                    figure: _spread([c[figure] for c in cpu if figure in c])
                    for figure in CPU_FIGURES
                    if any(figure in c for c in cpu)
                },
            }
        row["candidate_vs_base"] = _spread(
            [c / b for c, b in zip(rates["candidate"], rates["base"], strict=True)]
        )
        rows.append(row)
    return rows


def _print_table(report: dict) -> None:
    sides = report["sides"]
    table = Table(
        title=f"gRPC: base {sides['base']['asked']} against candidate "
        f"{sides['candidate']['asked']}: medians of {len(report['rounds'])} round(s) (min-max)"
    )
    for column in ("producers", "pgbench", "floor", "base", "candidate", "candidate / base"):
        table.add_column(column, justify="right")
    for row in report["summary"]:
        table.add_row(
            str(row["producers"]),
            _rate(row["baseline"]),
            f"{_rate(row['floor'])}\n{row['floor_vs_baseline']['median']:.2f}x pgbench\n"
            f"server {row['floor_server_us']['median']:,.0f} µs/msg",
            _side_cell(row["base"]),
            _side_cell(row["candidate"]),
            f"{row['candidate_vs_base']['median']:.2f}x",
        )
    console.print(table)


def _side_cell(side: dict) -> str:
    cpu = side["cpu"]
    lines = [
        _rate(side),
        f"{side['vs_floor']['median']:.2f}x floor, {side['vs_baseline']['median']:.2f}x pgbench",
    ]
    if "server_us" in cpu:
        lines.append(f"server {cpu['server_us']['median']:,.0f} µs/msg")
    if "postgres_us" in cpu:
        lines.append(f"Postgres {cpu['postgres_us']['median']:,.0f} µs/msg")
    if "pg_write_transactions_per_message" in cpu:
        lines.append(f"{cpu['pg_write_transactions_per_message']['median']:.2f} txn/msg")
    return "\n".join(lines)


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    console.print(f"total {time.perf_counter() - started:.0f} s")
