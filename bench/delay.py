"""Delay messages: how late after its delivery time each is received, with many pending.

`pending` delayed messages are sent first (in batches), due evenly over
`spread` seconds starting `lead` seconds after the sends end, so that all of
them are pending at once. Consumers of one group long-poll and ack; each
message's lateness is the time it was received less its delivery time (the
claim, the wake-up at the group's next due delivery, the receive's return).

    python -m bench.delay [--database-url URL] [--pending 10000] [--spread 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta

from bench.database import bench_database
from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.domain.messages import NewMessage

TOPIC = "bench-delay"
GROUP = "bench-delay-consumers"
BATCH = 500


@dataclass(frozen=True)
class DelayResult:
    pending: int
    received: int
    spread_seconds: float
    consumers: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    early: int  # received before their time: must be 0
    late_over_1s: int  # received more than 1 s after their time


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def run(
    url: str, *, pending: int, spread: float, lead: float = 3.0, consumers: int = 4
) -> DelayResult:
    settings = Settings(database_url=url, max_long_poll_seconds=60)
    async with Coordinator.connect(url, settings) as core:
        await core.delivery.subscribe(GROUP, TOPIC)
        # Time the sends, then place the delivery times after them.
        started = time.monotonic()
        first = datetime.now(UTC) + timedelta(seconds=lead + pending / 2000)
        dues = [first + timedelta(seconds=spread * i / max(pending - 1, 1)) for i in range(pending)]
        for start in range(0, pending, BATCH):
            batch = [
                NewMessage(topic=TOPIC, body=b"due", deliver_at=due)
                for due in dues[start : start + BATCH]
            ]
            await core.transactions.send_batch(batch)
        if datetime.now(UTC) >= first:
            raise SystemExit(
                f"sending took {time.monotonic() - started:.1f} s: the first delivery time "
                "passed before all were pending; give a smaller --pending"
            )
        lateness: list[float] = []
        deadline = time.monotonic() + (dues[-1] - datetime.now(UTC)).total_seconds() + 30

        async def consume() -> None:
            while len(lateness) < pending and time.monotonic() < deadline:
                got = await core.delivery.receive(GROUP, max_messages=64, wait_seconds=5)
                now = datetime.now(UTC)
                for message in got:
                    assert message.deliver_at is not None
                    lateness.append((now - message.deliver_at).total_seconds())
                if got:
                    await core.delivery.ack_batch(GROUP, [m.receipt_handle for m in got])

        tasks = [asyncio.create_task(consume()) for _ in range(consumers)]
        # The first consumer done saw the last message (or the deadline):
        # the others are in a long poll that would only run out.
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    ms = [seconds * 1000 for seconds in lateness] or [float("nan")]
    return DelayResult(
        pending=pending,
        received=len(lateness),
        spread_seconds=spread,
        consumers=consumers,
        p50_ms=round(statistics.median(ms), 1),
        p99_ms=round(_percentile(ms, 0.99), 1),
        max_ms=round(max(ms), 1),
        early=sum(1 for value in lateness if value < 0),
        late_over_1s=sum(1 for value in lateness if value > 1),
    )


def main(argv: list[str] | None = None) -> DelayResult:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="measure this server (default: embedded)")
    parser.add_argument("--pending", type=int, default=10_000, help="delayed messages pending")
    parser.add_argument("--spread", type=float, default=20.0, help="seconds their times span")
    parser.add_argument("--consumers", type=int, default=4, help="concurrent long polls")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    with bench_database(args.database_url) as database:
        result = asyncio.run(
            run(database.url, pending=args.pending, spread=args.spread, consumers=args.consumers)
        )
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        print(
            f"{result.received}/{result.pending} delayed messages (due over "
            f"{result.spread_seconds:g} s, {result.consumers} consumers) received after their "
            f"time by p50 {result.p50_ms} ms, p99 {result.p99_ms} ms, max {result.max_ms} ms; "
            f"early: {result.early}, over 1 s late: {result.late_over_1s}"
        )
    return result


if __name__ == "__main__":
    main()
