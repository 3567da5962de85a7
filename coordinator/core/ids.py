"""Identifiers the coordinator hands out.

Each is 32 hex digits: the time it was minted (milliseconds since the Unix
epoch, 48 bits) then 80 random bits, like a UUIDv7. Random bits alone would
do for uniqueness (any number of nodes mint ids without coordination), but
the unique indexes on `message_id` and `transaction_id` would then take
every new key at a random place: in a table holding months of messages, two
index pages far apart per message, each read from disk and each written to
the WAL in full after every checkpoint. Led by the time, new keys land at
the indexes' right edge, on pages already in memory, however long the
history (docs/performance.md "A long history").
"""

from __future__ import annotations

import secrets
import time


def _time_ordered() -> str:
    return f"{time.time_ns() // 1_000_000 & 0xFFFF_FFFF_FFFF:012x}{secrets.token_hex(10)}"


def new_message_id() -> str:
    # Upper-case hex like RocketMQ's message ids.
    return _time_ordered().upper()


def new_transaction_id() -> str:
    # 80 random bits: unguessable by anyone but its producer.
    return _time_ordered()
