"""The soak's verdict: what consumers got, measured against the producers' local truth.

Pure functions over collected evidence, so planted mismatches can show that
it fails when it should (tests/acceptance/test_soak.py).

For every consumer group, the set of message ids delivered must equal the
set whose local transaction committed: a committed one never delivered is
*lost*, anything else delivered is *unexpected*. Redelivery of a message
that was not acked is the at-least-once contract, but none may follow a
confirmed ack, and no two deliveries may share an attempt number (two
consumers holding one message at once): those are *unexpected duplicates*.
The coordinator must also agree with the truth message by message and have
nothing left `prepared` once the run settled; and no group may have dead
letters (the soak's consumers ack most deliveries, so using up the attempts
means deliveries went missing).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Protocol


class Ack(StrEnum):
    ACKED = "acked"  # 200: the delivery is gone, proof
    NOT_FOUND = "not_found"  # 404: probably acked by a lost earlier answer
    STALE = "stale"  # 409: received again meanwhile
    FAILED = "failed"  # no node answered


@dataclass(frozen=True)
class Delivery:
    message_id: str
    attempt: int


@dataclass(frozen=True)
class AckRecord:
    message_id: str
    attempt: int
    outcome: Ack


@dataclass(frozen=True)
class GroupEvidence:
    deliveries: tuple[Delivery, ...] = ()
    acks: tuple[AckRecord, ...] = ()
    dead_letters: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Evidence:
    committed_locally: frozenset[str]  # message ids whose local transaction committed
    coordinator_states: Mapping[str, str]  # message id -> state, for every message of the run
    groups: Mapping[str, GroupEvidence]
    settled: bool = True  # prepared messages and unacked deliveries ran out in time


@dataclass(frozen=True)
class GroupVerdict:
    group: str
    deliveries: int
    distinct: int
    lost: frozenset[str]
    unexpected: frozenset[str]
    unexpected_duplicates: frozenset[str]
    dead_letters: frozenset[str]

    @property
    def duplicates(self) -> int:
        """Deliveries of a message already delivered: redeliveries, expected or not."""
        return self.deliveries - self.distinct

    @property
    def ok(self) -> bool:
        return not (self.lost or self.unexpected or self.unexpected_duplicates)


@dataclass(frozen=True)
class Verdict:
    committed: int  # messages whose local transaction committed
    groups: tuple[GroupVerdict, ...]
    stuck_prepared: frozenset[str]
    not_committed_by_coordinator: frozenset[str]  # committed locally only
    committed_without_local_commit: frozenset[str]  # committed by the coordinator only
    settled: bool
    problems: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems


def judge(evidence: Evidence) -> Verdict:
    committed_by_coordinator = frozenset(
        m for m, state in evidence.coordinator_states.items() if state == "committed"
    )
    stuck = frozenset(m for m, s in evidence.coordinator_states.items() if s == "prepared")
    groups = tuple(
        judge_group(name, group, evidence.committed_locally)
        for name, group in sorted(evidence.groups.items())
    )
    verdict = Verdict(
        committed=len(evidence.committed_locally),
        groups=groups,
        stuck_prepared=stuck,
        not_committed_by_coordinator=evidence.committed_locally - committed_by_coordinator,
        committed_without_local_commit=committed_by_coordinator - evidence.committed_locally,
        settled=evidence.settled,
    )
    return replace(verdict, problems=tuple(_problems(verdict)))


def judge_group(name: str, group: GroupEvidence, committed: frozenset[str]) -> GroupVerdict:
    """One group's deliveries judged against the messages that were committed."""
    delivered = frozenset(d.message_id for d in group.deliveries)
    return GroupVerdict(
        group=name,
        deliveries=len(group.deliveries),
        distinct=len(delivered),
        lost=committed - delivered,
        unexpected=delivered - committed,
        unexpected_duplicates=_unexpected_duplicates(group.deliveries, group.acks),
        dead_letters=group.dead_letters,
    )


def _unexpected_duplicates(
    deliveries: Iterable[Delivery], acks: Iterable[AckRecord]
) -> frozenset[str]:
    """Messages delivered after a confirmed ack, or twice with one attempt number.

    Attempts only grow, and a receipt handle is stale once its message is
    received again, so a confirmed ack of attempt n leaves no attempt > n:
    the attempt number orders deliveries and acks across processes and
    nodes without trusting anyone's clock.
    """
    acked_attempt: dict[str, list[int]] = defaultdict(list)
    for ack in acks:
        if ack.outcome is Ack.ACKED:
            acked_attempt[ack.message_id].append(ack.attempt)
    found: set[str] = set()
    for message_id, attempts in acked_attempt.items():
        if len(attempts) > 1:
            found.add(message_id)
    seen = Counter((d.message_id, d.attempt) for d in deliveries)
    for (message_id, attempt), times in seen.items():
        acked = acked_attempt.get(message_id)
        if times > 1 or (acked and attempt > min(acked)):
            found.add(message_id)
    return frozenset(found)


class Problems(list[str]):
    """What a verdict found wrong, one sentence each."""

    def add(self, what: str, ids: frozenset[str]) -> None:
        """A sentence for a non-empty set of ids: its size and the first few."""
        if ids:
            sample = ", ".join(sorted(ids)[:5])
            self.append(f"{what}: {len(ids)} ({sample}{', ...' if len(ids) > 5 else ''})")


class RunVerdict(Protocol):
    """What both soaks judge the same way: the producers' truth against the coordinator."""

    @property
    def committed(self) -> int: ...
    @property
    def settled(self) -> bool: ...
    @property
    def stuck_prepared(self) -> frozenset[str]: ...
    @property
    def not_committed_by_coordinator(self) -> frozenset[str]: ...
    @property
    def committed_without_local_commit(self) -> frozenset[str]: ...


def run_problems(verdict: RunVerdict) -> Problems:
    """The problems of the run as a whole; each soak adds its per-group ones."""
    problems = Problems()
    if not verdict.committed:
        problems.append("no local transaction committed: the run proves nothing")
    if not verdict.settled:
        problems.append("did not settle in time: prepared messages or unacked deliveries left")
    problems.add("left prepared", verdict.stuck_prepared)
    problems.add("committed locally, not by the coordinator", verdict.not_committed_by_coordinator)
    problems.add(
        "committed by the coordinator, not locally", verdict.committed_without_local_commit
    )
    return problems


def _problems(verdict: Verdict) -> list[str]:
    problems = run_problems(verdict)
    for group in verdict.groups:
        problems.add(f"{group.group}: lost (committed, never delivered)", group.lost)
        problems.add(f"{group.group}: unexpected (delivered, never committed)", group.unexpected)
        problems.add(f"{group.group}: delivered again after an ack", group.unexpected_duplicates)
        problems.add(f"{group.group}: dead-lettered", group.dead_letters)
    return problems
