"""What the failover load was told: every answer, and the facts the 2xx answers acknowledged.

Producer and consumer threads write here as they go; `snapshot()` copies
it out for the verifier. Times are `time.monotonic()` of this process, so a
scenario marks its faults with the same clock.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from bench.soak.verdict import Ack, AckRecord, Delivery


class Door(StrEnum):
    HTTP = "http"
    GRPC = "grpc"


class Kind(StrEnum):
    PREPARE = "prepare"
    END = "end"
    RECEIVE = "receive"
    ACK = "ack"
    SUBSCRIBE = "subscribe"


PRODUCING = frozenset({Kind.PREPARE, Kind.END})


@dataclass(frozen=True, slots=True)
class Answer:
    """One attempt of one request, and what came back.

    `status` is the HTTP status, or over gRPC the RocketMQ code of the
    response (20000 is OK); 0 when nothing came back (the connection failed,
    or the attempt's timeout ran out). `error` is the HTTP error code, the
    RocketMQ code's name, or the transport failure (an httpx exception's
    name, a gRPC status code's name). `waited` is the long poll the request
    asked for, which is not slowness.
    """

    door: Door
    kind: Kind
    ok: bool
    status: int
    error: str | None
    sent_at: float
    answered_at: float
    retryable: bool = False  # the client sends it again (503, HA_NOT_AVAILABLE, no answer)
    waited: float = 0.0
    detail: str | None = None  # what a failure said: the error's sentence, gRPC's details

    @property
    def seconds(self) -> float:
        return self.answered_at - self.sent_at

    @property
    def answered(self) -> bool:
        return self.status != 0


@dataclass(frozen=True)
class Snapshot:
    """A copy of the ledger at one moment."""

    topic: str
    groups: tuple[str, ...]  # the consumer groups that consumed
    answers: tuple[Answer, ...]
    minted: dict[str, Door]  # every message id a producer tried to send
    prepared: dict[str, str]  # message id -> transaction id, prepare answered 2xx
    ended: dict[str, str]  # transaction id -> "commit" | "rollback", end answered 2xx
    conflicts: dict[str, str]  # transaction id -> the refusal of its end (409, PRECONDITION_FAILED)
    deliveries: dict[str, tuple[Delivery, ...]]  # consumer group -> every message it received
    acks: dict[str, tuple[AckRecord, ...]]  # consumer group -> the outcome of each ack
    gave_up: Counter[str]  # "door kind" -> requests whose retries ran out (horizon or stop)
    crashes: tuple[str, ...]  # threads that died of something unforeseen

    def acknowledged_commits(self) -> frozenset[str]:
        """The message ids whose commit was acknowledged."""
        return frozenset(m for m, tx in self.prepared.items() if self.ended.get(tx) == "commit")


class Ledger:
    """Thread-safe: every method takes the lock.

    What scenarios and `Load.drain` poll (`oks_since`, `undelivered_commits`)
    is kept up to date as facts come in, so that polling costs the same
    after a million answers as after ten.
    """

    def __init__(self, topic: str, groups: tuple[str, ...]) -> None:
        self.topic = topic
        self.groups = groups
        self._lock = threading.Lock()
        self._answers: list[Answer] = []
        self._minted: dict[str, Door] = {}
        self._prepared: dict[str, str] = {}
        self._message_of: dict[str, str] = {}  # transaction id -> message id
        self._ended: dict[str, str] = {}
        self._conflicts: dict[str, str] = {}
        self._deliveries: dict[str, list[Delivery]] = {g: [] for g in groups}
        self._delivered: dict[str, set[str]] = {g: set() for g in groups}
        # Acknowledged commits each group has not received yet.
        self._awaited: dict[str, set[str]] = {g: set() for g in groups}
        self._last_delivery: dict[str, float] = {}
        self._acks: dict[str, list[AckRecord]] = {g: [] for g in groups}
        # Per kind, when the ledger learnt of each 2xx: appended under the lock,
        # so in order, and counted from any time by bisection.
        self._oks: dict[Kind, list[float]] = {kind: [] for kind in Kind}
        self._gave_up: Counter[str] = Counter()
        self._crashes: list[str] = []

    def answer(self, answer: Answer) -> Answer:
        with self._lock:
            self._answers.append(answer)
            if answer.ok:
                self._oks[answer.kind].append(time.monotonic())
        return answer

    def minted(self, message_id: str, door: Door) -> None:
        with self._lock:
            self._minted[message_id] = door

    def prepared(self, message_id: str, transaction_id: str) -> None:
        with self._lock:
            self._prepared[message_id] = transaction_id
            self._message_of[transaction_id] = message_id

    def ended(self, transaction_id: str, resolution: str) -> None:
        with self._lock:
            self._ended[transaction_id] = resolution
            message_id = self._message_of.get(transaction_id)
            if resolution != "commit" or message_id is None:
                return
            for group in self.groups:
                if message_id not in self._delivered[group]:
                    self._awaited[group].add(message_id)

    def conflict(self, transaction_id: str, error: str) -> None:
        with self._lock:
            self._conflicts[transaction_id] = error

    def delivered(self, group: str, message_id: str, attempt: int, at: float) -> None:
        with self._lock:
            self._deliveries.setdefault(group, []).append(Delivery(message_id, attempt))
            self._delivered.setdefault(group, set()).add(message_id)
            self._awaited.get(group, set()).discard(message_id)
            self._last_delivery[group] = at

    def acked(self, group: str, message_id: str, attempt: int, outcome: Ack) -> None:
        with self._lock:
            self._acks.setdefault(group, []).append(AckRecord(message_id, attempt, outcome))

    def gave_up(self, door: Door, kind: Kind) -> None:
        with self._lock:
            self._gave_up[f"{door} {kind}"] += 1

    def crashed(self, what: str) -> None:
        with self._lock:
            self._crashes.append(what)

    def undelivered_commits(self) -> int:
        """Acknowledged commits not received yet, summed over the groups."""
        with self._lock:
            return sum(len(awaited) for awaited in self._awaited.values())

    def last_delivery(self) -> float | None:
        """When any group last received a message."""
        with self._lock:
            return max(self._last_delivery.values(), default=None)

    def oks_since(self, since: float, kinds: Iterable[Kind] = PRODUCING) -> int:
        """2xx answers to requests of `kinds` recorded at or after `since`."""
        with self._lock:
            return sum(
                len(oks) - bisect.bisect_left(oks, since)
                for oks in (self._oks[kind] for kind in kinds)
            )

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(
                topic=self.topic,
                groups=self.groups,
                answers=tuple(self._answers),
                minted=dict(self._minted),
                prepared=dict(self._prepared),
                ended=dict(self._ended),
                conflicts=dict(self._conflicts),
                deliveries={g: tuple(d) for g, d in self._deliveries.items()},
                acks={g: tuple(a) for g, a in self._acks.items()},
                gave_up=Counter(self._gave_up),
                crashes=tuple(self._crashes),
            )
