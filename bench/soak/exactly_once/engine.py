"""One exactly-once soak run: the consistency soak's phases with inbox consumers and client kills.

Set up (PostgreSQL listening on loopback too, for the check sources; the
producers' database and one per consumer group), load under chaos (the
consistency soak's node and, when asked, PostgreSQL faults, plus the kill
plan's producer and consumer SIGKILLs), settle, then judge the consumer
databases' `orders` against the producers' committed orders.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.server import free_port
from bench.soak import coordinator_db
from bench.soak.chaos import Chaos, FaultCounts, plan_faults
from bench.soak.engine import Soak, SoakOptions
from bench.soak.exactly_once import stores
from bench.soak.exactly_once.coordinator_db import resolutions_by_group, settled_by_check
from bench.soak.exactly_once.kills import KillCounts, Killer, plan_kills
from bench.soak.exactly_once.supervisor import (
    CHECK_MODES,
    InboxClientOptions,
    InboxSupervisor,
    Stores,
)
from bench.soak.exactly_once.tally import InboxTally
from bench.soak.exactly_once.verdict import Evidence, Verdict, judge
from bench.soak.layout import CONSUMER_GROUPS
from bench.soak.postgres import Postgres
from bench.soak.progress import ProgressView
from bench.soak.supervisor import Supervision
from bench.soak.truth import database_next_to
from coordinator.client import Inbox
from coordinator.db import migrate


@dataclass(frozen=True)
class ExactlyOnceOptions(SoakOptions):
    consumers_per_group: int = 2
    fail_probability: float = 0.05
    postgres_faults: bool = False  # the consistency soak's PostgreSQL restarts, too

    def inbox_clients(self) -> InboxClientOptions:
        return InboxClientOptions(
            **asdict(self.clients()),
            consumers_per_group=self.consumers_per_group,
            fail_probability=self.fail_probability,
        )


@dataclass
class ExactlyOnceResult:
    options: ExactlyOnceOptions
    run: str
    verdict: Verdict
    tally: InboxTally
    faults: FaultCounts
    kills: KillCounts
    supervision: Supervision
    consumer_kills: int  # every consumer SIGKILLed (the plan's)
    events: list[str]
    coordinator_states: Counter[str]
    resolutions: Counter[str]  # "producer group: source -> state"
    settled_by_database: int  # settled by a check no producer answered
    settled_by_producer: int  # settled by a check a producer answered
    most_checks: int
    settle_seconds: float
    postgres_restarts_possible: bool


class ExactlyOnceSoak(Soak):
    options: ExactlyOnceOptions
    supervisor: InboxSupervisor | None  # type: ignore[assignment]

    def __init__(self, options: ExactlyOnceOptions, workdir: Path, progress: ProgressView) -> None:
        super().__init__(options, workdir, progress)
        self.tally = InboxTally(  # type: ignore[assignment]
            self.layout.producer_journals,
            {name: self.layout.consumer_journals(name) for name in CONSUMER_GROUPS},
        )
        self.stores: Stores | None = None
        self.killer: Killer | None = None
        self._kills_noted = 0

    # set-up ----------------------------------------------------------------
    def _setup(self) -> None:
        self.layout.make_directories()
        self.progress.note(f"exactly-once soak {self.layout.run_id}: in {self.layout.workdir}")
        self.stores = self._stores()
        supervisor = InboxSupervisor(
            self.layout,
            self.options.inbox_clients(),
            self.database_url,
            self.stores,
            self.options.nodes,
            self._event,
        )
        self.supervisor = supervisor
        supervisor.start_nodes()
        self._subscribe(supervisor.nodes[0].url)
        supervisor.start_clients()
        rng = random.Random(self.options.seed)
        plan = plan_faults(
            rng,
            self.options.seconds,
            self.options.nodes,
            postgres=self.options.postgres_faults and self.postgres is not None,
        )
        self.chaos = Chaos(plan, supervisor.nodes, self.postgres, self._since_load_started)
        kills = plan_kills(
            rng,
            self.options.seconds,
            producers=self.options.producers,
            groups=len(CHECK_MODES),
            consumers=len(supervisor.consumer_keys),
        )
        self.killer = Killer(
            kills,
            supervisor.kill_producer,
            supervisor.kill_group,
            supervisor.kill_consumer,
            self._since_load_started,
        )

    def _stores(self) -> Stores:
        if self.options.database_url:
            self.database_url = self.options.database_url
            truth = self.options.truth_database_url or database_next_to(
                self.database_url, "soak_truth"
            )
            source = truth
            consumers = {
                name: database_next_to(self.database_url, f"soak_consumer_{name}")
                for name in CONSUMER_GROUPS
            }
        else:
            self.postgres = Postgres(self.layout.workdir, tcp_port=free_port())
            self.postgres.init()
            self.postgres.start()
            self.database_url = self.postgres.create_database("coordinator")
            truth = self.options.truth_database_url or self.postgres.create_database("producers")
            # The coordinator checks a check source's URL like a check URL: TCP.
            source = self.options.truth_database_url or self.postgres.tcp_url("producers")
            consumers = {
                name: self.postgres.create_database(f"consumer_{name}") for name in CONSUMER_GROUPS
            }
        self.truth_url = truth
        migrate.upgrade(self.database_url)
        stores.create_producer_tables(truth)
        for name, url in consumers.items():
            stores.create_consumer_tables(url)
            Inbox(url, consumer_group=self.layout.consumer_group(name)).create_table()
        return Stores(truth_url=truth, check_source_url=source, consumer_urls=consumers)

    # phases ------------------------------------------------------------------
    def _tick(self) -> None:
        super()._tick()
        assert self.killer is not None
        self.killer.step()
        for event in self.killer.counts.events[self._kills_noted :]:
            self.progress.note(f"  {event}")
        self._kills_noted = len(self.killer.counts.events)

    def _finish_faults(self) -> None:
        super()._finish_faults()
        assert self.killer is not None and self.supervisor is not None
        self.killer.finish()
        self.supervisor.release()

    # the verdict ---------------------------------------------------------------
    def _judge(self, settled: bool, settle_seconds: float) -> ExactlyOnceResult:  # type: ignore[override]
        assert self.chaos is not None and self.supervisor is not None
        assert self.killer is not None and self.stores is not None
        tally: InboxTally = self.tally  # type: ignore[assignment]
        tally.read()
        run, topic = self.layout.run_id, self.layout.topic
        with coordinator_db.connect(self.database_url) as conn:
            states = coordinator_db.states(conn, topic)
            resolutions = resolutions_by_group(conn, topic)
            by_check = settled_by_check(conn, topic)
            most_checks = coordinator_db.most_checks(conn, topic)
        committed = stores.committed_orders(self.truth_url, run)
        evidence = Evidence(
            committed={order: c.amount for order, c in committed.items()},
            begun=frozenset(tally.begun),
            committed_messages=frozenset(c.message_id for c in committed.values()),
            coordinator_states=states,
            groups={
                name: stores.consumer_orders(url, run)
                for name, url in self.stores.consumer_urls.items()
            },
            barrier_disagreements=stores.barrier_disagreements(
                self.truth_url, run, frozenset(tally.transaction_ids)
            ),
            settled=settled,
        )
        return ExactlyOnceResult(
            options=self.options,
            run=run,
            verdict=judge(evidence),
            tally=tally,
            faults=self.chaos.counts,
            kills=self.killer.counts,
            supervision=self.supervisor.counts,
            consumer_kills=self.supervisor.consumer_kills,
            events=sorted(
                self.chaos.counts.events + self.killer.counts.events + self.events,
                key=lambda event: float(event.split(" s ", 1)[0]),
            ),
            coordinator_states=Counter(states.values()),
            resolutions=resolutions,
            settled_by_database=len(by_check - tally.answered),
            settled_by_producer=len(by_check & tally.answered),
            most_checks=most_checks,
            settle_seconds=settle_seconds,
            postgres_restarts_possible=self.postgres is not None,
        )

    # display -------------------------------------------------------------------
    def _status(self, phase: str) -> str:
        assert self.chaos is not None and self.supervisor is not None
        assert self.killer is not None
        tally: InboxTally = self.tally  # type: ignore[assignment]
        handled = " ".join(
            f"{name}:{outcomes['handled'] + outcomes['handled_unacked']}"
            for name, outcomes in tally.outcomes.items()
        )
        nodes = self.supervisor.nodes
        return (
            f"{phase} | orders {tally.transactions} | written {handled}"
            f" | kills: producers {self.supervisor.counts.producer_kills}"
            f" consumers {self.supervisor.consumer_kills}"
            f" nodes {self.chaos.counts.coordinator_kills}"
            f" | nodes up {sum(n.alive for n in nodes)}/{len(nodes)}"
        )
