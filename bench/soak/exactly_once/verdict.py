"""The exactly-once verdict: each consumer group's `orders` table against the producers' truth.

Pure functions over collected evidence, so planted mismatches show that it
fails when it should (tests/acceptance/test_soak_exactly_once.py).

For every consumer group, the orders written must be exactly the orders
whose local transaction committed, each once and with its amount: a
committed order with no row is *missing*, one with several rows is a
*duplicate* (a handler's effect twice: what the inbox exists to prevent),
a row for an order that never committed is *unexpected* (and *rolled back*
when its producer is known to have begun it). The truth must be whole (a
`committed` barrier row exactly for each committed order), the coordinator
must agree with it message by message and hold nothing `prepared` once the
run settled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from bench.soak.verdict import run_problems


@dataclass(frozen=True)
class Evidence:
    committed: Mapping[str, int]  # order id -> amount, for every locally committed order
    begun: frozenset[str]  # order ids whose local transaction began (committed or not)
    committed_messages: frozenset[str]  # message ids of the committed orders
    coordinator_states: Mapping[str, str]  # message id -> state, every message of the run
    groups: Mapping[str, Mapping[str, list[int]]]  # group -> order id -> amounts written
    # Transactions whose barrier row and order row disagree in the producers' database.
    barrier_disagreements: frozenset[str] = frozenset()
    settled: bool = True  # prepared messages and unacked deliveries ran out in time


@dataclass(frozen=True)
class GroupVerdict:
    group: str
    rows: int
    orders: int
    missing: frozenset[str]
    duplicated: frozenset[str]
    unexpected: frozenset[str]
    rolled_back: frozenset[str]  # of the unexpected, those begun and not committed
    wrong_amount: frozenset[str]

    @property
    def ok(self) -> bool:
        return not (self.missing or self.duplicated or self.unexpected or self.wrong_amount)


@dataclass(frozen=True)
class Verdict:
    committed: int
    rolled_back_locally: int  # begun, never committed
    groups: tuple[GroupVerdict, ...]
    stuck_prepared: frozenset[str]
    not_committed_by_coordinator: frozenset[str]  # committed locally only
    committed_without_local_commit: frozenset[str]  # committed by the coordinator only
    barrier_disagreements: frozenset[str]
    settled: bool
    problems: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems


def judge(evidence: Evidence) -> Verdict:
    states = evidence.coordinator_states
    by_coordinator = frozenset(m for m, state in states.items() if state == "committed")
    verdict = Verdict(
        committed=len(evidence.committed),
        rolled_back_locally=len(evidence.begun - evidence.committed.keys()),
        groups=tuple(
            _judge_group(name, rows, evidence) for name, rows in sorted(evidence.groups.items())
        ),
        stuck_prepared=frozenset(m for m, state in states.items() if state == "prepared"),
        not_committed_by_coordinator=evidence.committed_messages - by_coordinator,
        committed_without_local_commit=by_coordinator - evidence.committed_messages,
        barrier_disagreements=evidence.barrier_disagreements,
        settled=evidence.settled,
    )
    return replace(verdict, problems=tuple(_problems(verdict)))


def _judge_group(name: str, rows: Mapping[str, list[int]], evidence: Evidence) -> GroupVerdict:
    committed = evidence.committed
    written = frozenset(rows)
    unexpected = written - committed.keys()
    return GroupVerdict(
        group=name,
        rows=sum(len(amounts) for amounts in rows.values()),
        orders=len(written),
        missing=frozenset(committed.keys() - written),
        duplicated=frozenset(o for o, amounts in rows.items() if len(amounts) > 1),
        unexpected=unexpected,
        rolled_back=unexpected & evidence.begun,
        wrong_amount=frozenset(
            o for o, amounts in rows.items() if o in committed and set(amounts) != {committed[o]}
        ),
    )


def _problems(verdict: Verdict) -> list[str]:
    problems = run_problems(verdict)
    problems.add("barrier and order rows disagree", verdict.barrier_disagreements)
    for group in verdict.groups:
        problems.add(f"{group.group}: missing (committed, no order row)", group.missing)
        problems.add(f"{group.group}: written more than once", group.duplicated)
        problems.add(f"{group.group}: rolled back locally, yet written", group.rolled_back)
        problems.add(
            f"{group.group}: written, never begun by a producer",
            group.unexpected - group.rolled_back,
        )
        problems.add(f"{group.group}: written with another amount", group.wrong_amount)
    return problems
