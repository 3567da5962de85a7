"""The official RocketMQ 5 Python client, unmodified, against the coordinator's gRPC door.

A transactional Producer sends one half message and commits it; a
SimpleConsumer receives it and acks it. Start a coordinator with its gRPC
door, then run the example from the repository's root (the client is the
PyPI package `rocketmq-python-client`, part of `pip install 'coordinator[grpc]'`):

    .venv/bin/coordinator serve --grpc-port 8081
    .venv/bin/python examples/rocketmq_client_producer.py [HOST:PORT]

The endpoint is the argument, else $COORDINATOR_GRPC_ENDPOINT, else
127.0.0.1:8081. RocketMQ 5 has no producer group: the coordinator files the
message under its topic as producer group, and checks back with a producer
whose Telemetry stream announced that topic; the checker below answers such
a check-back (it would come only if the commit were lost). The client logs
to ~/logs/rocketmq_python/.
"""

from __future__ import annotations

import os
import sys
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)

TOPIC = "rocketmq-example"
CONSUMER_GROUP = "rocketmq-example-consumers"
RECEIVE_SECONDS = 30.0


class CommitChecker(TransactionChecker):
    """The local transaction of every message this example sends committed."""

    def check(self, message: Message) -> TransactionResolution:
        print(f"check-back for {message.message_id}: answering COMMIT")
        return TransactionResolution.COMMIT


def main(argv: list[str]) -> int:
    endpoint = argv[0] if argv else os.environ.get("COORDINATOR_GRPC_ENDPOINT", "127.0.0.1:8081")
    configuration = ClientConfiguration(endpoint, Credentials())
    consumer = SimpleConsumer(
        configuration, CONSUMER_GROUP, {TOPIC: FilterExpression("*")}, await_duration=2
    )
    producer = Producer(configuration, topics=(TOPIC,), checker=CommitChecker())
    consumer.startup()
    producer.startup()
    try:
        # A subscription gets only what is committed after it exists. The group
        # subscribes when the consumer announces itself or first receives: receive
        # once before sending (nothing is there yet).
        consumer.receive(16, 30)

        message = Message()
        message.topic = TOPIC
        message.tag = "created"
        message.keys = "order-1001"
        message.body = b"order 1001 created"
        transaction = producer.begin_transaction()
        receipt = producer.send(message, transaction)
        print(f"sent half message {receipt.message_id} (transaction {receipt.transaction_id})")
        # ... the local transaction runs here; it succeeded:
        transaction.commit()
        print(f"committed {receipt.message_id}")

        deadline = time.monotonic() + RECEIVE_SECONDS
        while time.monotonic() < deadline:
            for received in consumer.receive(16, 30):
                print(
                    f"received {received.message_id}: {received.body.decode()!r} "
                    f"tag {received.tag}, delivery attempt {received.delivery_attempt}"
                )
                consumer.ack(received)
                print(f"acked {received.message_id}")
                if received.message_id == receipt.message_id:
                    return 0
        print(f"{receipt.message_id} was not received within {RECEIVE_SECONDS:g} s")
        return 1
    finally:
        producer.shutdown()
        consumer.shutdown()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
