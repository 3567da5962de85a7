"""A producer process that stops between its half messages and their ends.

    python tests/crashing_producer.py ENDPOINT GROUP TOPIC JOURNAL OUTCOME...

It starts an SDK TransactionProducer (instance id `crashing`) and sends one
half message per OUTCOME (`commit` or `rollback`), each from a thread of its
own. Each local transaction records its outcome in JOURNAL, which stands for
the producer's local database (one fsynced JSON line per transaction), and
then never returns: no end is ever sent. The test SIGKILLs the process once
JOURNAL holds every line, so the kill falls exactly between the half
messages and their ends, and another instance of the group answers the
check-backs from JOURNAL.

Run as a script by path (tests/ is not an installed package): it needs only
the SDK.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

from coordinator.client import (
    LocalTransactionState,
    Message,
    TransactionListener,
    TransactionProducer,
)


class StuckAfterLocalTransaction(TransactionListener):
    def __init__(self, journal: Path) -> None:
        self.journal = journal
        self._lock = threading.Lock()

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState | None:
        line = json.dumps(
            {"message_id": msg.message_id, "transaction_id": msg.transaction_id, "outcome": arg}
        )
        with self._lock, self.journal.open("a") as journal:
            journal.write(line + "\n")
            journal.flush()
            os.fsync(journal.fileno())
        threading.Event().wait()  # the process is killed here, before any end
        return None

    def check_local_transaction(self, msg: Message) -> LocalTransactionState | None:
        # The process dies before any of its messages is due for a check.
        return LocalTransactionState.UNKNOWN


def main(endpoint: str, group: str, topic: str, journal: str, *outcomes: str) -> None:
    listener = StuckAfterLocalTransaction(Path(journal))
    producer = TransactionProducer(group, listener, endpoint, instance_id="crashing").start()
    senders = [
        threading.Thread(
            target=producer.send_message_in_transaction,
            args=(Message(topic, f"order {i}: {outcome}"), outcome),
            daemon=True,
        )
        for i, outcome in enumerate(outcomes)
    ]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join()


if __name__ == "__main__":
    main(*sys.argv[1:])
