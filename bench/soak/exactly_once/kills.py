"""Client kills at random moments: producer and consumer processes SIGKILLed, then restarted.

Drawn from the seed before the run, like chaos.py's plan of node and
PostgreSQL faults, and run beside it (a client kill may fall while a node is
down). Three kinds, each among the first three kills so a short run has all:

- one producer process, started again at once (a new one, in its slot);
- every producer of one group, kept down longer than the coordinator's
  producer TTL: the group has no live instance, so its check source answers
  even in mode `fallback`;
- one consumer process, started again after a moment.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

FIRST_KILL_SECONDS = (2.0, 5.0)
BETWEEN_SECONDS = (1.5, 5.0)
CALM_AT_END_SECONDS = 5.0
CONSUMER_DOWN_SECONDS = (0.0, 2.0)
# Longer than the soak's producer TTL (4 s): a fallback group must be seen
# without live producers for a while.
GROUP_DOWN_SECONDS = (6.0, 10.0)


class KillKind(StrEnum):
    PRODUCER = "producer"
    PRODUCER_GROUP = "producer_group"
    CONSUMER = "consumer"


WEIGHTS = {KillKind.PRODUCER: 4, KillKind.PRODUCER_GROUP: 1, KillKind.CONSUMER: 4}


@dataclass(frozen=True)
class Kill:
    at: float  # seconds into the load
    kind: KillKind
    target: int  # a producer slot, a producer group's index, or a consumer's index
    down_seconds: float


def plan_kills(
    rng: random.Random, seconds: float, producers: int, groups: int, consumers: int
) -> list[Kill]:
    first = list(KillKind)
    rng.shuffle(first)
    kills: list[Kill] = []
    at = rng.uniform(*FIRST_KILL_SECONDS)
    while True:
        kind = first.pop(0) if first else rng.choices(list(WEIGHTS), list(WEIGHTS.values()))[0]
        if kind is KillKind.PRODUCER:
            target, down = rng.randrange(producers), 0.0
        elif kind is KillKind.PRODUCER_GROUP:
            target, down = rng.randrange(groups), rng.uniform(*GROUP_DOWN_SECONDS)
        else:
            target, down = rng.randrange(consumers), rng.uniform(*CONSUMER_DOWN_SECONDS)
        if at + down > seconds - CALM_AT_END_SECONDS:
            return kills
        kills.append(Kill(round(at, 2), kind, target, round(down, 2)))
        # A group kept down is not killed again meanwhile.
        at += (down if kind is KillKind.PRODUCER_GROUP else 0.0) + rng.uniform(*BETWEEN_SECONDS)


@dataclass
class KillCounts:
    producers: int = 0  # processes SIGKILLed by the plan (a group kill counts each)
    producer_groups: int = 0  # times a whole group was killed and kept down
    consumers: int = 0
    events: list[str] = field(default_factory=list)


class Killer:
    """Runs a plan, one step per tick; `kill_*` callbacks do the killing, return what died."""

    def __init__(
        self,
        plan: list[Kill],
        kill_producer: Callable[[int, float], int],
        kill_group: Callable[[int, float], int],
        kill_consumer: Callable[[int, float], str],
        clock: Callable[[], float],
    ) -> None:
        self.pending = list(plan)
        self.kill_producer = kill_producer
        self.kill_group = kill_group
        self.kill_consumer = kill_consumer
        self.clock = clock
        self.counts = KillCounts()

    def step(self) -> None:
        while self.pending and self.clock() >= self.pending[0].at:
            self._kill(self.pending.pop(0))

    def finish(self) -> None:
        self.pending.clear()

    def _kill(self, kill: Kill) -> None:
        if kill.kind is KillKind.PRODUCER:
            self.counts.producers += self.kill_producer(kill.target, kill.down_seconds)
            what = f"SIGKILL producer slot {kill.target}"
        elif kill.kind is KillKind.PRODUCER_GROUP:
            killed = self.kill_group(kill.target, kill.down_seconds)
            self.counts.producers += killed
            self.counts.producer_groups += 1
            what = f"SIGKILL all {killed} producers of group {kill.target}"
        else:
            name = self.kill_consumer(kill.target, kill.down_seconds)
            self.counts.consumers += 1
            what = f"SIGKILL consumer {name}"
        down = f" for {kill.down_seconds:.1f} s" if kill.down_seconds else ""
        self.counts.events.append(f"{self.clock():6.1f} s  {what}{down}")
