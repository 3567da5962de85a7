"""Compare the coordinator's HTTP throughput at two revisions, in one run.

    python -m bench.ab --base main                     # the working tree against main
    python -m bench.ab --base main --candidate HEAD    # two commits
    python -m bench.ab --base HEAD --quick             # a short smoke run

The base (and a candidate given as a revision) is checked out in a temporary
git worktree, removed at the end. Both sides serve the same database on the
same embedded Postgres (when their migration heads differ: a database each,
migrated by its own code, on that same Postgres), one after the other, in an
order that alternates each round (base first, then candidate first);
pgbench's raw SQL limit is measured in every round too. On a shared, noisy
machine a drift hits both sides alike, so the figure that counts is the
candidate/base ratio within each round, summarised by its median over the
rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from psycopg import sql
from rich.console import Console
from rich.table import Table

from bench.baseline import BaselineResult, run_baseline
from bench.database import BenchDatabase, bench_database, on_database
from bench.http_load import LoadResult, run_batches, run_single
from bench.run import RESULTS, batch_producers, load_figures
from bench.server import coordinator_process
from coordinator.db.migrate import head_revisions
from coordinator.db.urls import out_of_schema

console = Console(width=140)
# The tree this module belongs to: the default candidate, and the repository
# the base's worktree is made from.
WORKING_TREE = Path(__file__).resolve().parents[1]
SIDES = ("base", "candidate")

# Run in a side's tree, with its PYTHONPATH: which package that imports, and its
# migration head.
_PROBE = (
    "import coordinator; from coordinator.db.migrate import head_revisions; "
    "print(coordinator.__file__); print(' '.join(sorted(head_revisions())))"
)


class Refusal(Exception):
    """The two sides cannot be compared; the message says why."""


@dataclass(frozen=True)
class Side:
    name: str  # "base" or "candidate"
    asked: str  # the revision or directory given on the command line
    tree: Path
    commit: str
    uncommitted_changes: bool
    head: str = ""  # its migration head, read by its own code

    def describe(self) -> str:
        changes = ", with uncommitted changes" if self.uncommitted_changes else ""
        return f"{self.asked} ({self.commit[:10]}{changes})"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, help="the revision to compare against")
    parser.add_argument(
        "--candidate",
        default=str(WORKING_TREE),
        help="a revision, or the directory of a checkout (default: this working tree)",
    )
    parser.add_argument("--rounds", type=int, default=4, help="each side runs once per round")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each load run")
    parser.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[64, 96],
        help="producers of the single-message runs, and pgbench clients of their baselines",
    )
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="1 round of 2 s runs, 16 producers")
    parser.add_argument("--out", type=Path, default=RESULTS / "ab.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.seconds, args.concurrency = 1, 2.0, [16]
    return compare_revisions(args, _compare, _print_table)


def compare_revisions(
    args: argparse.Namespace,
    compare: Callable[[Side, Side, argparse.Namespace], dict],
    print_table: Callable[[dict], None],
) -> dict:
    """Check out both sides, `compare` them, print the report and write it to `args.out`.

    A side that cannot be had, or two sides whose schemas differ, end the run
    with a sentence and exit status 1.
    """
    try:
        with ExitStack() as cleanup:
            base = _side(cleanup, "base", args.base)
            candidate = _side(cleanup, "candidate", args.candidate)
            base, candidate = _with_migration_heads(base, candidate)
            report = compare(base, candidate, args)
    except Refusal as refusal:
        console.print(f"[red]{refusal}[/red]")
        raise SystemExit(1) from None
    print_table(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    console.print(f"written to {args.out}")
    return report


def _side(cleanup: ExitStack, name: str, asked: str) -> Side:
    """A side's source tree: a temporary worktree of a revision (removed when `cleanup`
    closes), or else a directory as given."""
    try:
        commit = _git(WORKING_TREE, "rev-parse", "--verify", "--quiet", f"{asked}^{{commit}}")
    except subprocess.CalledProcessError:
        directory = Path(asked).expanduser()
        if not directory.is_dir():
            raise Refusal(
                f"{asked!r} is neither a revision of this repository nor a directory."
            ) from None
        tree = directory.resolve()
        commit = _git(tree, "rev-parse", "HEAD")
        changes = bool(_git(tree, "status", "--porcelain", "--untracked-files=no"))
        return Side(name, asked, tree, commit, changes)
    tree = cleanup.enter_context(_detached_worktree(commit))
    return Side(name, asked, tree, commit, False)


@contextmanager
def _detached_worktree(commit: str) -> Iterator[Path]:
    """`git worktree add --detach` of `commit` in a temporary directory, removed on exit
    (also on an error or Ctrl-C)."""
    parent = Path(tempfile.mkdtemp(prefix="coordinator-ab-"))
    tree = parent / "tree"
    try:
        _git(WORKING_TREE, "worktree", "add", "--detach", str(tree), commit)
        yield tree
    finally:
        # If it was never added, or only half, the directory goes below and prune forgets it.
        with suppress(subprocess.CalledProcessError):
            _git(WORKING_TREE, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(parent, ignore_errors=True)
        _git(WORKING_TREE, "worktree", "prune")


def _git(directory: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(directory), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def _with_migration_heads(*sides: Side) -> list[Side]:
    """The sides, each with its migration head read by its own code.

    Each head is read in a process that imports the side's code the way its server will
    (bench.server.coordinator_process's `source`); that it imports the side's tree is
    checked too.
    """
    read = []
    for side in sides:
        probe = subprocess.run(
            [sys.executable, "-c", _PROBE],
            cwd=side.tree,
            env={**os.environ, "PYTHONPATH": str(side.tree)},
            capture_output=True,
            text=True,
        )
        if probe.returncode != 0:
            raise Refusal(
                f"The {side.name}'s migration head could not be read: "
                f"{(probe.stderr.strip().splitlines() or ['no error output'])[-1]}"
            )
        package, head = probe.stdout.strip().splitlines()
        if not Path(package).resolve().is_relative_to(side.tree):
            raise Refusal(f"The {side.name}'s code was imported from {package}, not its tree.")
        read.append(replace(side, head=head))
    return read


@contextmanager
def side_databases(database: BenchDatabase, sides: dict[str, Side]) -> Iterator[dict[str, str]]:
    """The database URL each side serves.

    Sides with this process's migration head share `database`, which it migrated. When
    a side's schema differs (a change that adds a migration), each side gets a database
    of its own in the same PostgreSQL, migrated by its own code (`coordinator db
    upgrade` run from its tree) and dropped at the end: the same server, so the
    comparison stays fair.
    """
    own = " ".join(sorted(head_revisions()))
    if all(side.head == own for side in sides.values()):
        yield dict.fromkeys(sides, database.url)
        return
    urls: dict[str, str] = {}
    admin = psycopg.connect(database.url, autocommit=True)

    def drop(dbname: str) -> None:
        statement = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        admin.execute(statement.format(sql.Identifier(dbname)))

    try:
        for name, side in sides.items():
            dbname = f"ab_{name}"
            drop(dbname)
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
            # Each side's own code puts its objects where it keeps them (a side
            # from before the coordinator's schema keeps them in public).
            urls[name] = on_database(out_of_schema(database.url), dbname)
            upgrade = ["--database-url", urls[name], "db", "upgrade"]
            migrated = subprocess.run(
                [sys.executable, "-m", "coordinator", *upgrade],
                cwd=side.tree,
                env={**os.environ, "PYTHONPATH": str(side.tree)},
                capture_output=True,
                text=True,
            )
            if migrated.returncode != 0:
                raise Refusal(
                    f"The {side.name}'s database could not be migrated by its code: "
                    f"{(migrated.stderr.strip().splitlines() or ['no error output'])[-1]}"
                )
        console.print(
            "the sides' migration heads differ "
            f"({', '.join(f'{n} {s.head}' for n, s in sides.items())}): each serves a "
            "database of its own, in the same PostgreSQL"
        )
        yield urls
    finally:
        for dbname in (f"ab_{name}" for name in sides):
            with suppress(psycopg.Error):
                drop(dbname)
        admin.close()


def _compare(base: Side, candidate: Side, args: argparse.Namespace) -> dict:
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    sides = {"base": base, "candidate": candidate}
    batchers = batch_producers(args.concurrency)
    console.print(f"base: {base.describe()}, candidate: {candidate.describe()}")
    rounds = []
    with bench_database(None) as database, side_databases(database, sides) as urls:
        for number in range(1, args.rounds + 1):
            order = SIDES if number % 2 else SIDES[::-1]
            measured: dict = {"round": number, "order": list(order), "baseline": []}
            for clients in args.concurrency:
                with console.status(f"round {number}: pgbench, {clients} clients ..."):
                    result = run_baseline(database, clients=clients, seconds=args.seconds)
                measured["baseline"].append(asdict(result))
                _print_run(number, "baseline", f"{clients} clients", result)
            for name in order:
                measured[name] = _measure_side(urls[name], sides[name], number, batchers, args)
            rounds.append(measured)
    return {
        "started_at": started_at,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "settings": {k: str(v) for k, v in vars(args).items()},
        "sides": {
            name: {
                "asked": side.asked,
                "commit": side.commit,
                "uncommitted_changes": side.uncommitted_changes,
            }
            for name, side in sides.items()
        },
        "rounds": rounds,
        "summary": _summary(rounds, args.concurrency, batchers),
    }


def _measure_side(
    database_url: str, side: Side, number: int, batchers: int, args: argparse.Namespace
) -> dict:
    """One side's runs of a round, on a server of its own, stopped at the end."""
    singles = []
    with coordinator_process(database_url, source=side.tree) as server:
        for producers in args.concurrency:
            with console.status(f"round {number}: {side.name}, {producers} producers ..."):
                result = run_single(server.url, concurrency=producers, seconds=args.seconds)
            singles.append({"producers": producers} | load_figures(result))
            _print_run(number, side.name, f"single, {producers} producers", result)
        with console.status(f"round {number}: {side.name}, batch API ..."):
            result = run_batches(
                server.url, concurrency=batchers, seconds=args.seconds, batch_size=args.batch_size
            )
        _print_run(number, side.name, f"batch, {batchers} producers", result)
    return {"single": singles, "batch": {"producers": batchers} | load_figures(result)}


def _print_run(number: int, who: str, load: str, result: BaselineResult | LoadResult) -> None:
    console.print(f"round {number}, {who}, {load}: {result.messages_per_second:,.0f} msgs/s")


def _summary(rounds: list[dict], concurrency: list[int], batchers: int) -> list[dict]:
    """Per load: each side's rate over the rounds, its ratio to the baseline of the same
    round, and the candidate/base ratio of the same round (medians, minima, maxima)."""
    rows = []
    for index, producers in enumerate([*concurrency, batchers]):
        is_batch = index == len(concurrency)
        # The batch run's reference, as in bench.run: the first concurrency's baseline.
        baseline_index = 0 if is_batch else index
        baseline = [r["baseline"][baseline_index]["messages_per_second"] for r in rounds]
        rates = {
            name: [
                (r[name]["batch"] if is_batch else r[name]["single"][index])["messages_per_second"]
                for r in rounds
            ]
            for name in SIDES
        }
        row: dict = {
            "load": "batch" if is_batch else "single",
            "producers": producers,
            "baseline_clients": concurrency[baseline_index],
            "baseline": _spread(baseline),
        }
        for name in SIDES:
            row[name] = _spread(rates[name]) | {
                "vs_baseline": _spread([s / b for s, b in zip(rates[name], baseline, strict=True)])
            }
        row["candidate_vs_base"] = _spread(
            [c / b for c, b in zip(rates["candidate"], rates["base"], strict=True)]
        )
        rows.append(row)
    return rows


def _spread(values: list[float]) -> dict:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def _print_table(report: dict) -> None:
    rounds = len(report["rounds"])
    sides = report["sides"]
    table = Table(
        title=f"base {sides['base']['asked']} against candidate {sides['candidate']['asked']}: "
        f"medians of {rounds} round(s) (min-max), {os.cpu_count()} cores"
    )
    for column in (
        "load",
        "baseline",
        "base",
        "base vs baseline",
        "candidate",
        "candidate vs baseline",
        "candidate / base",
    ):
        table.add_column(column, justify="left" if column == "load" else "right")
    for row in report["summary"]:
        table.add_row(
            _load_name(row),
            _rate(row["baseline"]),
            _rate(row["base"]),
            _ratio(row["base"]["vs_baseline"]),
            _rate(row["candidate"]),
            _ratio(row["candidate"]["vs_baseline"]),
            _ratio(row["candidate_vs_base"]),
        )
    console.print(table)


def _load_name(row: dict) -> str:
    if row["load"] == "single":
        return f"HTTP, one message per call\n({row['producers']} producers)"
    return (
        f"HTTP, batch API\n({row['producers']} producers,\n"
        f"baseline of {row['baseline_clients']} clients)"
    )


def _rate(spread: dict) -> str:
    return f"{spread['median']:,.0f} msgs/s\n({spread['min']:,.0f}-{spread['max']:,.0f})"


def _ratio(spread: dict) -> str:
    return f"{spread['median']:.2f}x\n({spread['min']:.2f}-{spread['max']:.2f})"


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    console.print(f"total {time.perf_counter() - started:.0f} s")
