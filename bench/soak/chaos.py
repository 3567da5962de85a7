"""Faults at random moments: coordinator nodes SIGKILLed, PostgreSQL stopped, then restored.

The plan is drawn from the seed before the run, so a seed replays the same
faults at the same moments (the load around them still varies). Faults come
one at a time, each restored before the next, with calm at the end so the
last ones are over before the load stops. A plan of any useful length has at
least one node kill and, when the soak owns its PostgreSQL, one restart.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from bench.soak.nodes import Node
from bench.soak.postgres import Postgres

FIRST_FAULT_SECONDS = (3.0, 6.0)
DOWN_SECONDS = (0.5, 3.0)
BETWEEN_SECONDS = (2.0, 7.0)
CALM_AT_END_SECONDS = 5.0


class FaultKind(StrEnum):
    NODE = "node"  # SIGKILL one node
    ALL_NODES = "all_nodes"  # SIGKILL every node: no coordinator at all for a while
    POSTGRES_FAST = "postgres_fast"  # pg_ctl stop -m fast: sessions ended, clean shutdown
    POSTGRES_IMMEDIATE = "postgres_immediate"  # pg_ctl stop -m immediate: a crash

    @property
    def postgres(self) -> bool:
        return self in (FaultKind.POSTGRES_FAST, FaultKind.POSTGRES_IMMEDIATE)


WEIGHTS = {
    FaultKind.NODE: 5,
    FaultKind.ALL_NODES: 1,
    FaultKind.POSTGRES_FAST: 2,
    FaultKind.POSTGRES_IMMEDIATE: 2,
}


@dataclass(frozen=True)
class Fault:
    at: float  # seconds into the load
    kind: FaultKind
    node: int  # which node, for NODE
    down_seconds: float


def plan_faults(rng: random.Random, seconds: float, nodes: int, postgres: bool) -> list[Fault]:
    kinds = [k for k in WEIGHTS if postgres or not k.postgres]
    # The first faults cover every kind that matters, in a random order.
    first = [FaultKind.NODE]
    if postgres:
        first.append(rng.choice([FaultKind.POSTGRES_FAST, FaultKind.POSTGRES_IMMEDIATE]))
    rng.shuffle(first)
    faults: list[Fault] = []
    at = rng.uniform(*FIRST_FAULT_SECONDS)
    while True:
        down = rng.uniform(*DOWN_SECONDS)
        if at + down > seconds - CALM_AT_END_SECONDS:
            return faults
        kind = first.pop(0) if first else rng.choices(kinds, [WEIGHTS[k] for k in kinds])[0]
        faults.append(Fault(round(at, 2), kind, rng.randrange(nodes), round(down, 2)))
        at += down + rng.uniform(*BETWEEN_SECONDS)


@dataclass
class FaultCounts:
    coordinator_kills: int = 0
    postgres_restarts: int = 0
    postgres_crashes: int = 0  # of the restarts, those with -m immediate
    events: list[str] = field(default_factory=list)


class Chaos:
    """Runs a plan against the nodes and PostgreSQL, one step per tick of the soak.

    `clock` gives the seconds since the load started. Stopping and starting
    PostgreSQL take a while (a crash is replayed and checkpointed before it
    accepts connections), so events are timed when each action is over and a
    fault's downtime counts from then.
    """

    def __init__(
        self,
        plan: Sequence[Fault],
        nodes: Sequence[Node],
        postgres: Postgres | None,
        clock: Callable[[], float],
    ) -> None:
        self.clock = clock
        self.pending = list(plan)
        self.nodes = nodes
        self.postgres = postgres
        self.counts = FaultCounts()
        self._active: Fault | None = None
        self._restore_at = 0.0
        self.down_nodes: set[int] = set()  # killed on purpose: not to be restarted yet

    def step(self) -> None:
        elapsed = self.clock()
        if self._active is not None:
            if elapsed >= self._restore_at:
                self._restore()
        elif self.pending and elapsed >= self.pending[0].at:
            self._inflict(self.pending.pop(0))

    def finish(self) -> None:
        """No more faults; whatever is down comes back now."""
        self.pending.clear()
        if self._active is not None:
            self._restore()

    def _inflict(self, fault: Fault) -> None:
        self._active = fault
        if fault.kind.postgres:
            assert self.postgres is not None
            mode = "immediate" if fault.kind is FaultKind.POSTGRES_IMMEDIATE else "fast"
            self.postgres.stop(mode)
            self.counts.postgres_restarts += 1
            self.counts.postgres_crashes += mode == "immediate"
            what = f"postgres stopped (-m {mode})"
        else:
            victims = self.nodes if fault.kind is FaultKind.ALL_NODES else [self.nodes[fault.node]]
            for node in victims:
                node.kill()
                self.down_nodes.add(node.index)
            self.counts.coordinator_kills += len(victims)
            what = "SIGKILL node " + ", ".join(str(n.index) for n in victims)
        self._restore_at = self.clock() + fault.down_seconds
        self._event(f"{what} for {fault.down_seconds:.1f} s")

    def _restore(self) -> None:
        fault, self._active = self._active, None
        assert fault is not None
        if fault.kind.postgres:
            assert self.postgres is not None
            self.postgres.start()
            self._event("postgres accepts connections again")
        else:
            for index in sorted(self.down_nodes):
                self.nodes[index].start()
            self._event("restarted node " + ", ".join(map(str, sorted(self.down_nodes))))
            self.down_nodes.clear()

    def _event(self, what: str) -> None:
        self.counts.events.append(f"{self.clock():6.1f} s  {what}")
