"""The official RocketMQ 5 Python client's PushConsumer, unmodified, against the gRPC door.

A PushConsumer's listener is given each message of its group; a transactional
Producer sends three messages and commits them. The listener fails the first
delivery of the second one: the coordinator gives it back after the group's
backoff (1 s for a first failure), with delivery attempt 2. Start a
coordinator with its gRPC door, then run the example from the repository's
root (the client is the PyPI package `rocketmq-python-client`, part of
`pip install 'coordinator[grpc]'`):

    .venv/bin/coordinator serve --grpc-port 8081
    .venv/bin/python examples/rocketmq_push_consumer.py [HOST:PORT]

The endpoint is the argument, else $COORDINATOR_GRPC_ENDPOINT, else
127.0.0.1:8081. A group made FIFO over HTTP (`PUT
/v1/consumer-groups/{group}/subscriptions/{topic}` with `"fifo": true`) is
consumed in order per message group by the same code. The client logs to
~/logs/rocketmq_python/.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    TransactionChecker,
    TransactionResolution,
)

TOPIC = "rocketmq-push-example"
CONSUMER_GROUP = "rocketmq-push-example-consumers"
MESSAGES = 3
WAIT_SECONDS = 60.0


class CommitChecker(TransactionChecker):
    """The local transaction of every message this example sends committed."""

    def check(self, message: Message) -> TransactionResolution:
        return TransactionResolution.COMMIT


class Listener(MessageListener):
    """Prints each message; fails the first delivery of "order 2" to show the retry."""

    def __init__(self) -> None:
        self.consumed: set[str] = set()
        self.all_consumed = threading.Event()

    def consume(self, message: Message) -> ConsumeResult:
        body = message.body.decode()
        attempt = message.delivery_attempt
        if body == "order 2" and attempt == 1:
            print(f"failed {body!r} (delivery attempt {attempt}): it comes back after 1 s")
            return ConsumeResult.FAILURE
        print(f"consumed {body!r} (delivery attempt {attempt})")
        self.consumed.add(message.message_id)
        if len(self.consumed) == MESSAGES:
            self.all_consumed.set()
        return ConsumeResult.SUCCESS


def main(argv: list[str]) -> int:
    endpoint = argv[0] if argv else os.environ.get("COORDINATOR_GRPC_ENDPOINT", "127.0.0.1:8081")
    configuration = ClientConfiguration(endpoint, Credentials())
    listener = Listener()
    # The consumer's group subscribes when it starts: it gets what is
    # committed from then on.
    consumer = PushConsumer(configuration, CONSUMER_GROUP, listener, {TOPIC: FilterExpression("*")})
    producer = Producer(configuration, topics=(TOPIC,), checker=CommitChecker())
    consumer.startup()
    producer.startup()
    try:
        for n in range(1, MESSAGES + 1):
            message = Message()
            message.topic = TOPIC
            message.tag = "created"
            message.body = f"order {n}".encode()
            transaction = producer.begin_transaction()
            receipt = producer.send(message, transaction)
            transaction.commit()  # the local transaction succeeded
            print(f"committed {receipt.message_id}")
        started = time.monotonic()
        if listener.all_consumed.wait(WAIT_SECONDS):
            print(f"all {MESSAGES} consumed in {time.monotonic() - started:.1f} s")
            return 0
        print(f"only {len(listener.consumed)} of {MESSAGES} consumed within {WAIT_SECONDS:g} s")
        return 1
    finally:
        producer.shutdown()
        consumer.shutdown()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
