"""The RocketMQ 4.x TransactionProducer example, in Python against the coordinator.

Every local transaction answers UNKNOWN first; at check-back time the answer
depends on the message's index: index % 3 == 0 stays UNKNOWN (checked again
later), 1 commits, 2 rolls back. Start a coordinator (`coordinator serve`),
then run, from the repository's root:

    .venv/bin/python examples/transaction_producer.py [--endpoint http://127.0.0.1:8080]

With the default 6 s transaction timeout the first check-backs come after
about 6 s; the example keeps the producer running (serving check-backs) for
--seconds (default 30), then shuts it down cleanly. Messages that
stay UNKNOWN are checked every check interval (60 s by default) until the
check budget (15) is used up: start the coordinator with a short
`--check-interval` to watch that happen.
"""

from __future__ import annotations

import argparse
import itertools
import threading
import time
from typing import Any

from coordinator.client import (
    LocalTransactionState,
    Message,
    TransactionListener,
    TransactionProducer,
)


class TransactionListenerImpl(TransactionListener):
    def __init__(self) -> None:
        self._index = itertools.count()
        self._lock = threading.Lock()
        self.local_trans: dict[str, int] = {}

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        with self._lock:
            status = next(self._index) % 3
        assert msg.transaction_id is not None
        self.local_trans[msg.transaction_id] = status
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg: Message) -> LocalTransactionState:
        status = self.local_trans.get(msg.transaction_id or "")
        if status == 0:
            return LocalTransactionState.UNKNOWN
        if status == 2:
            return LocalTransactionState.ROLLBACK
        return LocalTransactionState.COMMIT  # 1, and unknown to this process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--endpoint", default="http://127.0.0.1:8080")
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()

    listener = TransactionListenerImpl()
    tags = ["TagA", "TagB", "TagC", "TagD", "TagE"]
    with TransactionProducer(
        "please_rename_unique_group_name", listener, args.endpoint, check_wait_seconds=5
    ) as producer:
        sent = []
        for i in range(10):
            msg = Message(
                topic="TopicTest",
                tags=tags[i % len(tags)],
                keys=[f"KEY{i}"],
                body=f"Hello RocketMQ {i}",
            )
            result = producer.send_message_in_transaction(msg, None)
            print(
                f"sent {i}: {result.message_id} transaction {result.transaction_id} "
                f"local state {result.local_state}"
            )
            sent.append(result)
            time.sleep(0.01)
        print(f"serving check-backs for up to {args.seconds:g} s ...")
        deadline = time.monotonic() + args.seconds
        while time.monotonic() < deadline:
            time.sleep(1)
    print("done")


if __name__ == "__main__":
    main()
