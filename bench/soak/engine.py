"""One soak run: set up, load under chaos, settle, collect, judge.

Every process the run starts is stopped by `close()`, which the caller runs
in a `finally` (and children die with the soak anyway, see children.py).
"""

from __future__ import annotations

import random
import secrets
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg

from bench.soak import coordinator_db, truth
from bench.soak.chaos import Chaos, FaultCounts, plan_faults
from bench.soak.layout import CONSUMER_GROUPS, Layout
from bench.soak.postgres import Postgres
from bench.soak.progress import ProgressView
from bench.soak.supervisor import ClientOptions, Supervision, Supervisor
from bench.soak.tally import Tally
from bench.soak.verdict import Evidence, Verdict, judge
from coordinator.db import migrate

TICK_SECONDS = 0.2


@dataclass(frozen=True)
class SoakOptions:
    seconds: float = 120.0
    producers: int = 5
    nodes: int = 2
    seed: int = 1
    database_url: str | None = None  # the coordinator's; unset: an embedded server of its own
    truth_database_url: str | None = None  # the producers'; unset: beside the coordinator's
    consumer_threads: int = 2
    no_ack_probability: float = 0.1
    invisible_seconds: float = 3.0
    think_seconds: float = 0.05
    settle_seconds: float = 90.0

    def clients(self) -> ClientOptions:
        return ClientOptions(
            producers=self.producers,
            seed=self.seed,
            think_seconds=self.think_seconds,
            consumer_threads=self.consumer_threads,
            no_ack_probability=self.no_ack_probability,
            invisible_seconds=self.invisible_seconds,
        )


@dataclass
class SoakResult:
    options: SoakOptions
    run: str
    verdict: Verdict
    tally: Tally
    faults: FaultCounts
    supervision: Supervision
    events: list[str]  # faults and unplanned exits, timed from the start of the load
    local_commits: int
    coordinator_states: Counter[str]
    resolutions: Counter[str]
    most_checks: int
    settle_seconds: float
    postgres_restarts_possible: bool


class Soak:
    def __init__(self, options: SoakOptions, workdir: Path, progress: ProgressView) -> None:
        self.options = options
        self.layout = Layout(secrets.token_hex(4), workdir)
        self.progress = progress
        self.postgres: Postgres | None = None
        self.database_url = ""
        self.truth_url = ""
        self.supervisor: Supervisor | None = None
        self.chaos: Chaos | None = None
        self.events: list[str] = []
        self._load_started = time.monotonic()  # events are timed from it, as chaos times faults
        self.tally = Tally(
            self.layout.producer_journals,
            {name: self.layout.consumer_journals(name) for name in CONSUMER_GROUPS},
        )

    def run(self) -> SoakResult:
        self._setup()
        self._load()
        started_settling = time.monotonic()
        settled = self._settle()
        settle_seconds = time.monotonic() - started_settling
        assert self.supervisor is not None
        self.supervisor.stop_clients()  # so their journals are complete
        return self._judge(settled, settle_seconds)

    def close(self) -> None:
        """Stop everything still running: clients, then nodes, then PostgreSQL."""
        if self.supervisor is not None:
            self.supervisor.stop_clients()
            self.supervisor.stop_nodes()
        if self.postgres is not None:
            self.postgres.close()

    # set-up ----------------------------------------------------------------
    def _setup(self) -> None:
        self.layout.make_directories()
        self.progress.note(f"soak {self.layout.run_id}: working in {self.layout.workdir}")
        self._databases()
        self.supervisor = Supervisor(
            self.layout,
            self.options.clients(),
            self.database_url,
            self.truth_url,
            self.options.nodes,
            self._event,
        )
        self.supervisor.start_nodes()
        self._subscribe(self.supervisor.nodes[0].url)
        self.supervisor.start_clients()
        plan = plan_faults(
            random.Random(self.options.seed),
            self.options.seconds,
            self.options.nodes,
            postgres=self.postgres is not None,
        )
        self.chaos = Chaos(plan, self.supervisor.nodes, self.postgres, self._since_load_started)

    def _databases(self) -> None:
        if self.options.database_url:
            self.database_url = self.options.database_url
        else:
            self.postgres = Postgres(self.layout.workdir)
            self.postgres.init()
            self.postgres.start()
            self.database_url = self.postgres.create_database("coordinator")
        self.truth_url = self.options.truth_database_url or (
            self.postgres.create_database("producers")
            if self.postgres is not None
            else truth.database_next_to(self.database_url)
        )
        migrate.upgrade(self.database_url)
        truth.create_tables(self.truth_url)

    def _subscribe(self, node_url: str) -> None:
        # Before any producer starts: a subscription only gets later commits.
        for name in CONSUMER_GROUPS:
            group, topic = self.layout.consumer_group(name), self.layout.topic
            answer = httpx.put(
                f"{node_url}/v1/consumer-groups/{group}/subscriptions/{topic}",
                json={"expression": "*"},
                timeout=30,
            )
            answer.raise_for_status()

    # phases ------------------------------------------------------------------
    def _since_load_started(self) -> float:
        return time.monotonic() - self._load_started

    def _load(self) -> None:
        assert self.chaos is not None and self.supervisor is not None
        seconds = self.options.seconds
        self._load_started = time.monotonic()
        shown, noted = 0.0, 0
        while (elapsed := self._since_load_started()) < seconds:
            self._tick()
            noted = self._note_faults(noted)
            if elapsed - shown >= 1.0:
                shown = elapsed
                self.tally.read()
                self.progress.show(self._status(f"load {elapsed:3.0f}/{seconds:.0f} s"))
            time.sleep(TICK_SECONDS)
        self._finish_faults()
        self._note_faults(noted)

    def _tick(self) -> None:
        """One step of the faults, then of the supervision."""
        assert self.chaos is not None and self.supervisor is not None
        self.chaos.step()
        self.supervisor.supervise(self.chaos.down_nodes)

    def _finish_faults(self) -> None:
        assert self.chaos is not None
        self.chaos.finish()

    def _settle(self) -> bool:
        """Until nothing is prepared or unacked and every producer stopped sending, bounded."""
        assert self.supervisor is not None
        self.layout.stop_load_file.touch()
        self.progress.note("load stopped; settling (check-backs and consumers keep going)")
        deadline = time.monotonic() + self.options.settle_seconds
        calm = 0
        while time.monotonic() < deadline:
            self.supervisor.supervise(down_on_purpose=())
            self.tally.read()
            prepared, unacked = self._unsettled()
            idle = all(name in self.tally.idle for name in self.supervisor.producer_names)
            self.progress.show(self._status(f"settling: {prepared} prepared, {unacked} unacked"))
            # Twice in a row: an idle mark and a last commit can cross.
            calm = calm + 1 if idle and prepared == 0 and unacked == 0 else 0
            if calm >= 2:
                return True
            time.sleep(0.5)
        return False

    def _unsettled(self) -> tuple[int, int]:
        try:
            with coordinator_db.connect(self.database_url) as conn:
                return coordinator_db.unsettled(conn, self.layout.topic)
        except psycopg.Error:  # down for a moment: settling waits for it
            return -1, -1

    # the verdict ---------------------------------------------------------------
    def _judge(self, settled: bool, settle_seconds: float) -> SoakResult:
        assert self.chaos is not None and self.supervisor is not None
        self.tally.read()
        topic = self.layout.topic
        with coordinator_db.connect(self.database_url) as conn:
            states = coordinator_db.states(conn, topic)
            dead = coordinator_db.dead_letters(conn, topic)
            resolutions = coordinator_db.resolutions(conn, topic)
            most_checks = coordinator_db.most_checks(conn, topic)
        committed = truth.committed_message_ids(self.truth_url, self.layout.run_id)
        evidence = Evidence(
            committed_locally=committed,
            coordinator_states=states,
            groups={
                name: self.tally.groups[name].evidence(
                    dead.get(self.layout.consumer_group(name), frozenset())
                )
                for name in CONSUMER_GROUPS
            },
            settled=settled,
        )
        return SoakResult(
            options=self.options,
            run=self.layout.run_id,
            verdict=judge(evidence),
            tally=self.tally,
            faults=self.chaos.counts,
            supervision=self.supervisor.counts,
            events=sorted(self.chaos.counts.events + self.events, key=_seconds),
            local_commits=len(committed),
            coordinator_states=Counter(states.values()),
            resolutions=resolutions,
            most_checks=most_checks,
            settle_seconds=settle_seconds,
            postgres_restarts_possible=self.postgres is not None,
        )

    # display -------------------------------------------------------------------
    def _status(self, phase: str) -> str:
        assert self.chaos is not None and self.supervisor is not None
        faults, tally = self.chaos.counts, self.tally
        delivered = " ".join(
            f"{name}:{len({d.message_id for d in g.deliveries})}"
            for name, g in tally.groups.items()
        )
        nodes = self.supervisor.nodes
        line = (
            f"{phase} | transactions {tally.transactions} | delivered {delivered}"
            f" | kills: producers {self.supervisor.counts.producer_kills}"
            f" nodes {faults.coordinator_kills} | postgres restarts {faults.postgres_restarts}"
            f" | nodes up {sum(n.alive for n in nodes)}/{len(nodes)}"
        )
        if self.postgres is not None:
            line += " | postgres " + ("up" if self.postgres.running else "DOWN")
        return line

    def _note_faults(self, noted: int) -> int:
        assert self.chaos is not None
        for event in self.chaos.counts.events[noted:]:
            self.progress.note(f"  {event}")
        return len(self.chaos.counts.events)

    def _event(self, what: str) -> None:
        line = f"{self._since_load_started():6.1f} s  {what}"
        self.events.append(line)
        self.progress.note(f"  {line}")


def _seconds(event: str) -> float:
    return float(event.split(" s ", 1)[0])
