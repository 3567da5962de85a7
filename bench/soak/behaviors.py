"""What a producer's local transaction does, chosen per transaction from a seeded draw."""

from __future__ import annotations

import random
from enum import StrEnum


class Behavior(StrEnum):
    COMMIT = "commit"  # commits, answers COMMIT
    ROLLBACK = "rollback"  # rolls back, answers ROLLBACK
    UNKNOWN_COMMITTED = "unknown_committed"  # commits, answers UNKNOWN: check-back says commit
    UNKNOWN_ROLLED_BACK = "unknown_rolled_back"  # rolls back, answers UNKNOWN
    RAISE_COMMITTED = "raise_committed"  # commits, then raises (the SDK answers UNKNOWN)
    RAISE = "raise"  # raises before committing
    KILLED_COMMITTED = "killed_committed"  # commits, then SIGKILLs its own process
    KILLED = "killed"  # SIGKILLs its own process inside the local transaction

    @property
    def kills(self) -> bool:
        return self in (Behavior.KILLED, Behavior.KILLED_COMMITTED)


# Relative weights. Kills are rare: each costs a process start, and every
# other behavior also needs check-backs from a live producer.
WEIGHTS: dict[Behavior, float] = {
    Behavior.COMMIT: 45,
    Behavior.ROLLBACK: 20,
    Behavior.UNKNOWN_COMMITTED: 10,
    Behavior.UNKNOWN_ROLLED_BACK: 8,
    Behavior.RAISE_COMMITTED: 6,
    Behavior.RAISE: 6,
    Behavior.KILLED_COMMITTED: 0.25,
    Behavior.KILLED: 0.25,
}


def draw(rng: random.Random) -> Behavior:
    return rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
