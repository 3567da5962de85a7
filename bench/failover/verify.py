"""The failover load's ledger held against the database, and the outage it saw.

`verify` reads the run's messages (by the message ids the producers
minted) and the dead letters of its topic, and returns what it found, not
asserts: every half message answered 2xx must be stored with the
transaction id it was answered with, every end answered 2xx must hold, and
each consumer group must have received every committed message and nothing
else. What an acknowledgement promised and the database no longer holds is
`lost`: the number that must be 0.

`outage` measures, around a fault at time T (`time.monotonic()`), the last
2xx before T, the first 2xx to a request sent after T, what was answered in
between, and the request in flight then that waited longest for its answer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from bench.failover.ledger import PRODUCING, Answer, Door, Kind, Ledger, Snapshot
from bench.soak import coordinator_db
from bench.soak.verdict import GroupEvidence, GroupVerdict, Problems, judge_group

_STATE_OF = {"commit": "committed", "rollback": "rolled_back"}
MISSING = "missing"


@dataclass(frozen=True)
class Verification:
    sent: int  # message ids the producers minted
    prepares_acked: int
    ends_acked: int
    # message id -> what is stored instead of the acknowledged transaction id
    # (MISSING: no row): an acknowledged half message lost
    lost_prepares: Mapping[str, str]
    # transaction id -> the state stored instead of the acknowledged one (MISSING: no row)
    lost_ends: Mapping[str, str]
    left_prepared: frozenset[str]  # prepare acked, end not, still prepared
    unacknowledged_ends: Counter[str]  # prepare acked, end not: the states they are in
    stored_unacknowledged: int  # stored though the send was never answered 2xx
    conflicts: Mapping[str, str]  # transaction id -> the refusal of its end
    committed: int  # the run's messages committed, in the database or by an acknowledged end
    groups: tuple[GroupVerdict, ...]
    gave_up: Counter[str]  # "door kind" -> requests whose retries ran out
    refusals: Counter[str]  # "door kind status error" -> answers neither 2xx nor retried
    crashes: tuple[str, ...]
    problems: tuple[str, ...]

    @property
    def lost(self) -> int:
        """Acknowledged facts that do not hold: half messages and ends."""
        return len(self.lost_prepares) + len(self.lost_ends)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(ledger: Ledger | Snapshot, database_url: str) -> Verification:
    """The ledger against the database `database_url` names (a multi-host URL works)."""
    record = ledger.snapshot() if isinstance(ledger, Ledger) else ledger
    with coordinator_db.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT message_id, transaction_id, state FROM messages "
            "WHERE topic = %s AND message_id = ANY(%s)",
            (record.topic, list(record.minted)),
        ).fetchall()
        dead_letters = coordinator_db.dead_letters(conn, record.topic)
    stored = {message_id: (tx, state) for message_id, tx, state in rows}
    return judge(record, stored, dead_letters)


def judge(
    record: Snapshot,
    stored: Mapping[str, tuple[str | None, str]],
    dead_letters: Mapping[str, frozenset[str]],
) -> Verification:
    """The verification of `record` against `stored` (message id -> (transaction id,
    state)) and each group's dead-lettered message ids."""
    state_of_tx = {tx: state for tx, state in stored.values() if tx is not None}
    lost_prepares = {}
    for message_id, tx in record.prepared.items():
        found = stored.get(message_id)
        if found is None or found[0] != tx:
            lost_prepares[message_id] = MISSING if found is None else f"transaction {found[0]}"
    lost_ends = {
        tx: state_of_tx.get(tx, MISSING)
        for tx, resolution in record.ended.items()
        if state_of_tx.get(tx) != _STATE_OF[resolution]
    }
    unended = {m: tx for m, tx in record.prepared.items() if tx not in record.ended}
    unacknowledged_ends = Counter(state_of_tx.get(tx, MISSING) for tx in unended.values())
    committed = frozenset(m for m, (_, state) in stored.items() if state == "committed")
    committed |= record.acknowledged_commits()
    groups = tuple(
        judge_group(
            group,
            GroupEvidence(
                record.deliveries.get(group, ()),
                record.acks.get(group, ()),
                dead_letters.get(group, frozenset()),
            ),
            committed,
        )
        for group in record.groups
    )
    verification = Verification(
        sent=len(record.minted),
        prepares_acked=len(record.prepared),
        ends_acked=len(record.ended),
        lost_prepares=lost_prepares,
        lost_ends=lost_ends,
        left_prepared=frozenset(
            m for m, tx in unended.items() if state_of_tx.get(tx) == "prepared"
        ),
        unacknowledged_ends=unacknowledged_ends,
        stored_unacknowledged=len(stored.keys() - record.prepared.keys()),
        conflicts=dict(record.conflicts),
        committed=len(committed),
        groups=groups,
        gave_up=Counter(record.gave_up),
        refusals=refusals(record.answers),
        crashes=record.crashes,
        problems=(),
    )
    return _with_problems(verification)


def refusals(answers: Iterable[Answer]) -> Counter[str]:
    """Answers that were neither 2xx nor sent again, by door, kind, status and error.

    Acks are left out: a stale or unknown receipt handle is an ordinary
    outcome, which the groups' evidence holds.
    """
    return Counter(
        f"{a.door} {a.kind} {a.status} {a.error}"
        for a in answers
        if not (a.ok or a.retryable or a.kind is Kind.ACK)
    )


def _with_problems(verification: Verification) -> Verification:
    problems = Problems()
    if not verification.committed:
        problems.append("nothing was committed: the run proves nothing")
    problems.add("half messages acknowledged and lost", frozenset(verification.lost_prepares))
    problems.add("ends acknowledged and lost", frozenset(verification.lost_ends))
    problems.add("ends refused as conflicting", frozenset(verification.conflicts))
    for group in verification.groups:
        problems.add(f"{group.group}: committed, never delivered", group.lost)
        problems.add(f"{group.group}: delivered, not committed", group.unexpected)
        problems.add(f"{group.group}: delivered again after an ack", group.unexpected_duplicates)
        problems.add(f"{group.group}: dead-lettered", group.dead_letters)
    problems.extend(f"a load thread died: {crash}" for crash in verification.crashes)
    return replace(verification, problems=tuple(problems))


# --- the outage around a fault ------------------------------------------------


@dataclass(frozen=True)
class Outage:
    at: float  # the fault's time.monotonic()
    last_ok_before: Answer | None  # the last 2xx answered at or before `at`
    first_ok_after: Answer | None  # the first 2xx to a request sent after `at`
    failed: int  # answered, not 2xx, between those two
    unanswered: int  # attempts that got no answer at all (connection failed, timed out) then
    longest: Answer | None  # of the requests in flight then, the one that waited longest

    @property
    def gap(self) -> float | None:
        """Seconds from the last 2xx before the fault to the first after it."""
        if self.last_ok_before is None or self.first_ok_after is None:
            return None
        return self.first_ok_after.answered_at - self.last_ok_before.answered_at

    @property
    def recovered_after(self) -> float | None:
        """Seconds from the fault to the first 2xx after it."""
        return None if self.first_ok_after is None else self.first_ok_after.answered_at - self.at

    @property
    def longest_seconds(self) -> float:
        """How long the slowest request waited for its answer (a long poll's wait not counted)."""
        return 0.0 if self.longest is None else _waited_for_answer(self.longest)


@dataclass(frozen=True)
class OutageReport:
    overall: Outage
    doors: Mapping[Door, Outage]


def outage(ledger: Ledger | Snapshot, at: float, kinds: Iterable[Kind] = PRODUCING) -> OutageReport:
    """The outage around a fault at `at`, seen by requests of `kinds` (by default
    the producers'), over both doors and per door."""
    record = ledger.snapshot() if isinstance(ledger, Ledger) else ledger
    wanted = frozenset(kinds)
    answers = [a for a in record.answers if a.kind in wanted]
    return OutageReport(
        overall=_outage(answers, at),
        doors={door: _outage([a for a in answers if a.door is door], at) for door in Door},
    )


def _outage(answers: list[Answer], at: float) -> Outage:
    before = [a for a in answers if a.ok and a.answered_at <= at]
    after = [a for a in answers if a.ok and a.sent_at > at]
    last = max(before, key=lambda a: a.answered_at, default=None)
    first = min(after, key=lambda a: a.answered_at, default=None)
    start = last.answered_at if last is not None else float("-inf")
    end = first.answered_at if first is not None else float("inf")
    within = [a for a in answers if not a.ok and start < a.answered_at <= end]
    in_flight = [a for a in answers if a.sent_at <= end and a.answered_at >= start]
    return Outage(
        at=at,
        last_ok_before=last,
        first_ok_after=first,
        failed=sum(1 for a in within if a.answered),
        unanswered=sum(1 for a in within if not a.answered),
        longest=max(in_flight, key=_waited_for_answer, default=None),
    )


def _waited_for_answer(answer: Answer) -> float:
    return answer.seconds - answer.waited
