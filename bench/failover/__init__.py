"""A load for failover runs: what a running coordinator acknowledged, held against the database.

`Load` (load.py) runs producers and consumers on both doors, HTTP and
RocketMQ gRPC, resending on "unavailable" as real clients do, and records
every answer and every acknowledged fact in a `Ledger` (ledger.py).
`verify` (verify.py) holds the ledger against the database and counts what
was acknowledged and lost; `outage` measures what the clients saw around a
fault. Independent of how the fault is made: scenarios mark its time with
`time.monotonic()`.
"""

from bench.failover.config import LoadConfig
from bench.failover.ledger import PRODUCING, Answer, Door, Kind, Ledger, Snapshot
from bench.failover.load import Load
from bench.failover.verify import Outage, OutageReport, Verification, outage, verify

__all__ = [
    "PRODUCING",
    "Answer",
    "Door",
    "Kind",
    "Ledger",
    "Load",
    "LoadConfig",
    "Outage",
    "OutageReport",
    "Snapshot",
    "Verification",
    "outage",
    "verify",
]
