"""Run every benchmark in one go and print one table (and JSON).

    python -m bench.run                 # the full run (1M and 10M resolved rows)
    python -m bench.run --quick         # smaller and shorter, for a smoke test
    python -m bench.run --database-url postgresql://...   # your server instead of embedded

Each coordinator figure is printed next to the raw SQL limit measured in the
same run on the same database (pgbench, same concurrency, no coordinator), as
a ratio: these machines are shared and noisy, absolute numbers drift between
runs, ratios much less. The single-message rows of both doors (HTTP, and
gRPC when the grpc extra is installed) also carry the CPU each process spent
per message (bench/cpu.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from dataclasses import asdict
from datetime import UTC, datetime
from importlib.util import find_spec
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.baseline import BaselineResult, run_baseline
from bench.checkback import ClaimResult, grow_resolved, run_claim
from bench.consumer_latency import run_consumer_latency
from bench.cpu import CpuMeter, per_message, postmaster_pid
from bench.database import BenchDatabase, bench_database
from bench.http_load import LoadResult, run_batches, run_single
from bench.server import coordinator_process, free_port

console = Console(width=120)
RESULTS = Path(__file__).parent / "results"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="measure this server (default: embedded)")
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[16, 64, 96],
        help="producers / pgbench clients; the single-message run is repeated for each "
        "(pgbench needs one connection per client; the embedded server allows 100)",
    )
    parser.add_argument(
        "--grpc-concurrency",
        type=int,
        nargs="*",
        default=[16, 64],
        help="producers of the gRPC single-message runs, each next to a baseline with as many "
        "clients (none: no gRPC rows; skipped too without the grpc extra)",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each throughput run")
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--resolved-rows", type=int, default=1_000_000)
    parser.add_argument("--backlog", type=int, default=20_000, help="due half messages to claim")
    parser.add_argument("--latency-samples", type=int, default=300)
    parser.add_argument(
        "--push-messages",
        type=int,
        default=5000,
        help="backlog each consumer drains: the official Python PushConsumer over gRPC and a "
        "SimpleConsumer over HTTP (0: none; skipped too without the grpc extra)",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes and short runs")
    parser.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.resolved_rows, args.backlog, args.latency_samples = (
            2.0,
            20_000,
            2_000,
            30,
        )
        args.push_messages = min(args.push_messages, 500)

    report: dict = {
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {k: str(v) for k, v in vars(args).items()},
    }
    grpc_concurrency = args.grpc_concurrency if _grpc_installed() else []
    with bench_database(args.database_url) as database:
        report["database"] = "embedded (pgserver)" if database.embedded else "external"
        postmaster = postmaster_pid(database.url)
        baseline_by_clients: dict[int, BaselineResult] = {}
        # The gRPC rows' concurrencies get a baseline of their own when the
        # HTTP rows have none with as many clients.
        for clients in dict.fromkeys([*args.concurrency, *grpc_concurrency]):
            with console.status(f"1/6 baseline: pgbench, the raw SQL limit, {clients} clients ..."):
                baseline_by_clients[clients] = run_baseline(
                    database, clients=clients, seconds=args.seconds
                )
            console.print(
                f"baseline, {clients} clients: "
                f"{baseline_by_clients[clients].messages_per_second:,.0f} msgs/s"
            )
        baselines = [baseline_by_clients[clients] for clients in args.concurrency]
        baseline = baselines[0]  # the reference for the batch and claim ratios
        report["baseline"] = asdict(baseline)

        with coordinator_process(database.url) as server:
            url = server.url
            meter = CpuMeter(server.process.pid, postmaster, database.url)
            singles, http_cpu = [], []
            for producers in args.concurrency:
                with console.status(f"2/6 HTTP, one message per call, {producers} producers ..."):
                    before = meter.snapshot()
                    singles.append(run_single(url, concurrency=producers, seconds=args.seconds))
                    http_cpu.append(per_message(before, meter.snapshot(), singles[-1].messages))
                console.print(
                    f"single, {producers} producers: {singles[-1].messages_per_second:,.0f} msgs/s"
                )
            single = singles[0]
            report["http_single"] = load_figures(single)
            report["concurrency"] = [
                {
                    "producers": b.clients,
                    "baseline": asdict(b),
                    "http_single": load_figures(s) | {"cpu_per_message": cpu},
                    "ratio": round(s.messages_per_second / b.messages_per_second, 3),
                }
                for b, s, cpu in zip(baselines, singles, http_cpu, strict=True)
            ]
            report["best_single_vs_best_baseline"] = _best_against_best(baselines, singles)
            with console.status("4/6 coordinator over HTTP, batch API ..."):
                batches = run_batches(
                    url,
                    concurrency=batch_producers(args.concurrency),
                    seconds=args.seconds,
                    batch_size=args.batch_size,
                )
            report["http_batch"] = load_figures(batches)
            console.print(f"batch: {batches.messages_per_second:,.0f} msgs/s")
            with console.status("5/6 commit-to-consumer latency ..."):
                latency = run_consumer_latency(url, samples=args.latency_samples)
            report["commit_to_consumer"] = load_figures(latency)
            console.print(f"commit to consumer p99: {latency.percentile(99):.1f} ms")

        grpc_rows = _grpc_rows(database, postmaster, grpc_concurrency, baseline_by_clients, args)
        report["grpc_single"] = grpc_rows
        grpc_floor = _grpc_floor(grpc_concurrency, baseline_by_clients, args)
        report["grpc_floor"] = grpc_floor
        if grpc_concurrency and args.push_messages:
            from bench.push_consumer import run_push_consumer

            with console.status("consumers: draining a backlog, PushConsumer and HTTP ..."):
                drains = run_push_consumer(database.url, args.push_messages)
            report["consumers"] = {name: load_figures(r) for name, r in drains.items()}

        claims = []
        for round_no, rows in enumerate((args.resolved_rows, args.resolved_rows * 10), start=1):
            with console.status(f"6/6 check-back claim: filling {rows:,} resolved rows ...") as s:
                grow_resolved(
                    database.url,
                    rows,
                    lambda have, s=s, rows=rows: s.update(
                        f"6/6 check-back claim: {have:,} of {rows:,} resolved rows"
                    ),
                )
                s.update(f"6/6 check-back claim: {args.backlog:,} due among {rows:,} resolved")
                claims.append(
                    run_claim(
                        database.url,
                        resolved_rows=rows,
                        backlog=args.backlog,
                        batch_size=args.batch_size,
                        round_no=round_no,
                    )
                )
            console.print(f"claim with {rows:,} resolved: {claims[-1].claimed_per_second:,.0f}/s")
        report["check_claim"] = [
            asdict(c)
            | {
                "claimed_per_second": c.claimed_per_second,
                "dispatched_per_second": c.dispatched_per_second,
                "ms_per_batch": c.ms_per_batch,
            }
            for c in claims
        ]

    _print_table(report, baselines, singles, grpc_rows, grpc_floor, batches, latency, claims)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    console.print(f"written to {args.out}")
    return report


def batch_producers(concurrency: list[int]) -> int:
    """Producers of the batch run: a quarter of the first single-message concurrency
    (each sends a whole batch per call)."""
    return max(1, concurrency[0] // 4)


def _grpc_installed() -> bool:
    return find_spec("grpc") is not None and find_spec("rocketmq") is not None


def _grpc_rows(
    database: BenchDatabase,
    postmaster: int | None,
    concurrency: list[int],
    baselines: dict[int, BaselineResult],
    args: argparse.Namespace,
) -> list[dict]:
    """gRPC, one transactional message per call (SendMessage + EndTransaction), on a
    server of its own started with the gRPC door: the HTTP rows' server runs without it."""
    if not concurrency:
        return []
    from bench.grpc_load import TOPIC, run_grpc_single, subscribe

    rows = []
    port = free_port()
    with coordinator_process(database.url, grpc_port=port) as server:
        subscribe(server.url)
        meter = CpuMeter(server.process.pid, postmaster, database.url)
        for producers in concurrency:
            with console.status(f"3/6 gRPC, one message per call, {producers} producers ..."):
                before = meter.snapshot()
                result = run_grpc_single(
                    f"127.0.0.1:{port}", concurrency=producers, seconds=args.seconds
                )
                cpu = per_message(before, meter.snapshot(), result.messages)
            console.print(
                f"gRPC single, {producers} producers: {result.messages_per_second:,.0f} msgs/s"
            )
            baseline = baselines[producers]
            rows.append(
                {
                    "producers": producers,
                    "topic": TOPIC,
                    "baseline": asdict(baseline),
                    "grpc_single": load_figures(result) | {"cpu_per_message": cpu},
                    "ratio": round(result.messages_per_second / baseline.messages_per_second, 3),
                }
            )
    return rows


def _grpc_floor(
    concurrency: list[int], baselines: dict[int, BaselineResult], args: argparse.Namespace
) -> dict | None:
    """The same gRPC load against grpc.aio answering constants (bench/grpc_floor.py), at the
    first gRPC concurrency: what the door costs before the coordinator does anything."""
    if not concurrency:
        return None
    from bench.grpc_floor import floor_server
    from bench.grpc_load import run_grpc_single

    producers = concurrency[0]
    status = f"3/6 gRPC floor, constant answers, {producers} producers ..."
    with console.status(status), floor_server() as (pid, endpoint):
        meter = CpuMeter(pid, None)
        before = meter.snapshot()
        result = run_grpc_single(endpoint, concurrency=producers, seconds=args.seconds)
        cpu = per_message(before, meter.snapshot(), result.messages)
    console.print(f"gRPC floor, {producers} producers: {result.messages_per_second:,.0f} msgs/s")
    baseline = baselines[producers]
    return {
        "producers": producers,
        "floor": load_figures(result) | {"cpu_per_message": cpu},
        "ratio": round(result.messages_per_second / baseline.messages_per_second, 3),
    }


def _best_against_best(baselines, singles) -> dict:  # type: ignore[no-untyped-def]
    """The coordinator's best single-message rate against the raw SQL limit:
    the best baseline rate at any concurrency of this run."""
    best_baseline = max(baselines, key=lambda b: b.messages_per_second)
    best_index = max(range(len(singles)), key=lambda i: singles[i].messages_per_second)
    best_single = singles[best_index]
    return {
        "producers": baselines[best_index].clients,
        "messages_per_second": round(best_single.messages_per_second, 1),
        "baseline_clients": best_baseline.clients,
        "baseline_messages_per_second": round(best_baseline.messages_per_second, 1),
        "ratio": round(best_single.messages_per_second / best_baseline.messages_per_second, 3),
    }


def load_figures(result: LoadResult) -> dict:
    """A load run's figures as the JSON reports give them."""
    return {
        "messages": result.messages,
        "seconds": round(result.seconds, 3),
        "messages_per_second": round(result.messages_per_second, 1),
        "p50_ms": round(result.percentile(50), 2),
        "p99_ms": round(result.percentile(99), 2),
    }


def _print_table(
    report: dict,
    baselines: list[BaselineResult],
    singles: list[LoadResult],
    grpc_rows: list[dict],
    grpc_floor: dict | None,
    batches: LoadResult,
    latency: LoadResult,
    claims: list[ClaimResult],
) -> None:
    table = Table(title=f"coordinator benchmarks ({report['database']}, {os.cpu_count()} cores)")
    for column in ("measure", "result", "p50", "p99", "vs baseline"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    baseline_rate = baselines[0].messages_per_second
    for baseline, single in zip(baselines, singles, strict=True):
        table.add_row(
            f"baseline: raw SQL (pgbench, {baseline.clients} clients)",
            f"{baseline.messages_per_second:,.0f} msgs/s",
            "",
            "",
            "1.00x",
        )
        table.add_row(
            f"HTTP, one message per call ({baseline.clients} producers)",
            f"{single.messages_per_second:,.0f} msgs/s",
            f"{single.percentile(50):.1f} ms",
            f"{single.percentile(99):.1f} ms",
            f"{single.messages_per_second / baseline.messages_per_second:.2f}x",
        )
    best = report["best_single_vs_best_baseline"]
    table.add_row(
        f"best single ({best['producers']} producers) vs best baseline "
        f"({best['baseline_clients']} clients)",
        f"{best['messages_per_second']:,.0f} msgs/s",
        "",
        "",
        f"{best['ratio']:.2f}x",
    )
    shown = {baseline.clients for baseline in baselines}
    for row in grpc_rows:
        if row["producers"] not in shown:
            table.add_row(
                f"baseline: raw SQL (pgbench, {row['producers']} clients)",
                f"{row['baseline']['messages_per_second']:,.0f} msgs/s",
                "",
                "",
                "1.00x",
            )
        grpc = row["grpc_single"]
        table.add_row(
            f"gRPC, one message per call ({row['producers']} producers)",
            f"{grpc['messages_per_second']:,.0f} msgs/s",
            f"{grpc['p50_ms']:.1f} ms",
            f"{grpc['p99_ms']:.1f} ms",
            f"{row['ratio']:.2f}x",
        )
    if grpc_floor is not None:
        floor = grpc_floor["floor"]
        table.add_row(
            f"gRPC floor: grpc.aio, constant answers ({grpc_floor['producers']} producers)",
            f"{floor['messages_per_second']:,.0f} msgs/s",
            f"{floor['p50_ms']:.1f} ms",
            f"{floor['p99_ms']:.1f} ms",
            f"{grpc_floor['ratio']:.2f}x",
        )
    table.add_row(
        f"HTTP, batch API ({batch_producers([b.clients for b in baselines])} producers)",
        f"{batches.messages_per_second:,.0f} msgs/s",
        f"{batches.percentile(50):.1f} ms",
        f"{batches.percentile(99):.1f} ms",
        f"{batches.messages_per_second / baseline_rate:.2f}x",
    )
    table.add_row(
        "commit to consumer (waiting)",
        f"{latency.messages} samples",
        f"{latency.percentile(50):.1f} ms",
        f"{latency.percentile(99):.1f} ms",
        "",
    )
    consumers = report.get("consumers", {})
    for key, measure in (
        ("http_simple_consumer", "consume committed: SimpleConsumer over HTTP (32 per receive)"),
        ("grpc_push_consumer", "consume committed: official Python PushConsumer (gRPC)"),
    ):
        if key in consumers:
            table.add_row(
                measure, f"{consumers[key]['messages_per_second']:,.0f} msgs/s", "", "", ""
            )
    for claim in claims:
        table.add_row(
            f"check claim, {claim.resolved_rows:,} resolved rows",
            f"{claim.claimed_per_second:,.0f} claims/s",
            f"{claim.ms_per_batch:.1f} ms/batch",
            "",
            f"{claim.claimed_per_second / baseline_rate:.2f}x",
        )
    if len(claims) == 2:
        growth = claims[1].ms_per_batch / claims[0].ms_per_batch
        table.add_row("claim time, 10x resolved rows", f"{growth:.2f}x", "", "", "")
        report["claim_time_growth_10x"] = round(growth, 3)
    for claim in claims:
        table.add_row(
            f"check claim + pull dispatch, {claim.resolved_rows:,}",
            f"{claim.dispatched_per_second:,.0f} checks/s",
            "",
            "",
            "",
        )
    console.print(table)


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    console.print(f"total {time.perf_counter() - started:.0f} s")
