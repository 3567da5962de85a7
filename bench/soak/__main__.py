"""python -m bench.soak: the consistency soak (see docs/operations.md#consistency-soak).

    python -m bench.soak                          # 2 minutes, 5 producers, 2 nodes
    python -m bench.soak --seconds 1800 --seed 7  # the long version
    python -m bench.soak --json > soak.json       # the counts as JSON on stdout
    python -m bench.soak --exactly-once --seconds 1800  # barrier, check sources, inbox

Exits 0 when every consumer group got exactly the committed messages (with
--exactly-once: wrote exactly the committed orders, each once), 1 on any
mismatch (listed), 130 when interrupted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from types import FrameType

from rich.console import Console

from bench.soak import report as soak_report
from bench.soak.engine import Soak, SoakOptions
from bench.soak.exactly_once import report as exactly_once_report
from bench.soak.exactly_once.engine import ExactlyOnceOptions, ExactlyOnceSoak
from bench.soak.progress import ProgressView


def parse(argv: list[str] | None) -> tuple[SoakOptions, argparse.Namespace]:
    defaults = SoakOptions()
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--seconds", type=float, default=defaults.seconds, help="length of the load"
    )
    parser.add_argument("--producers", type=int, default=defaults.producers, help="processes")
    parser.add_argument("--nodes", type=int, default=defaults.nodes, help="coordinator nodes")
    parser.add_argument("--seed", type=int, default=defaults.seed, help="faults and behaviors")
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=defaults.settle_seconds,
        help="longest wait, after the load, for check-backs and consumers to finish",
    )
    parser.add_argument(
        "--database-url",
        help="the coordinator's database (no Postgres restarts then); default: a server of its own",
    )
    parser.add_argument(
        "--truth-database-url",
        help="the producers' database; default: one beside the coordinator's",
    )
    parser.add_argument(
        "--exactly-once",
        action="store_true",
        help="producers with the barrier and a database check source, consumers with the inbox, "
        "producer and consumer processes killed too; judged on the consumers' order tables",
    )
    parser.add_argument(
        "--consumers-per-group",
        type=int,
        default=ExactlyOnceOptions.consumers_per_group,
        help="consumer processes per consumer group (--exactly-once)",
    )
    parser.add_argument(
        "--postgres-faults",
        action="store_true",
        help="restart PostgreSQL as well (--exactly-once; the plain soak always does)",
    )
    parser.add_argument("--json", action="store_true", help="print the counts as JSON on stdout")
    parser.add_argument("--workdir", type=Path, help="keep logs and journals here (kept)")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.producers < 1 or args.nodes < 1 or args.consumers_per_group < 1:
        parser.error("--seconds, --producers, --nodes and --consumers-per-group must be positive")
    if args.workdir and args.workdir.exists() and any(args.workdir.iterdir()):
        parser.error(f"--workdir {args.workdir} is not empty: journals of two runs would mix")
    common = {
        "seconds": args.seconds,
        "producers": args.producers,
        "nodes": args.nodes,
        "seed": args.seed,
        "database_url": args.database_url,
        "truth_database_url": args.truth_database_url,
        "settle_seconds": args.settle_seconds,
    }
    if args.exactly_once:
        return ExactlyOnceOptions(
            **common,
            consumers_per_group=args.consumers_per_group,
            postgres_faults=args.postgres_faults,
        ), args
    return SoakOptions(**common), args


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # SIGTERM unwinds like Ctrl-C, so the finally below stops every child.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    options, args = parse(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    console = Console(stderr=True)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="coordinator-soak-"))
    workdir.mkdir(parents=True, exist_ok=True)
    keep = args.workdir is not None
    ok = False
    try:
        with ProgressView(console) as progress:
            if isinstance(options, ExactlyOnceOptions):
                soak: Soak = ExactlyOnceSoak(options, workdir, progress)
                reporting = exactly_once_report
            else:
                soak, reporting = Soak(options, workdir, progress), soak_report
            try:
                result = soak.run()
            finally:
                soak.close()
        report = reporting.as_dict(result)  # type: ignore[attr-defined]
        ok = report["ok"]
        reporting.print_report(report, console if args.json else Console())  # type: ignore[attr-defined]
        if args.json:
            print(json.dumps(report, indent=2))
        return 0 if ok else 1
    except KeyboardInterrupt:
        console.print("interrupted: every process the soak started is stopped")
        return 130
    finally:
        if ok and not keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            console.print(f"logs and journals kept in {workdir}", highlight=False)


if __name__ == "__main__":
    sys.exit(main())
