"""The consumer inbox as plain SQL, with the official RocketMQ 5 Python client.

A transactional Producer sends three orders and commits them; a
SimpleConsumer records each order in PostgreSQL exactly once. Per message, in
one transaction of the consumer's database: insert the message's key into
the inbox table, ignoring a conflict; when no row came back the message was
processed before, so skip the work; else write the effect; commit; and only
then ack. The first order's ack is left out on purpose, as if the consumer
died between its commit and its ack: the order comes back with delivery
attempt 2 and is skipped, then acked.

Start a coordinator with its gRPC door, then run the example from the
repository's root with the endpoint and a PostgreSQL database of your own
(the client is the PyPI package `rocketmq-python-client`, part of
`pip install 'coordinator[grpc]'`):

    .venv/bin/coordinator serve --grpc-port 8081
    .venv/bin/python examples/rocketmq_inbox_consumer.py 127.0.0.1:8081 postgresql://localhost/shop

The key is (consumer group, topic, message id): the client hands no offset,
and a message sent through the gRPC door has its id unique within its topic
(the topic is its own producer group). The SDK's Inbox keys by the offset
instead (see docs/exactly-once.md). The client logs to ~/logs/rocketmq_python/.
"""

from __future__ import annotations

import sys
import time

import psycopg
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

TOPIC = "rocketmq-inbox-example"
CONSUMER_GROUP = "rocketmq-inbox-example-consumers"
ORDERS = 3
RECEIVE_SECONDS = 60.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS rocketmq_inbox (
    consumer_group text NOT NULL,
    topic text NOT NULL,
    message_id text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer_group, topic, message_id)
);
CREATE INDEX IF NOT EXISTS rocketmq_inbox_received_at ON rocketmq_inbox (received_at);
CREATE TABLE IF NOT EXISTS example_orders (message_id text NOT NULL, body text NOT NULL);
"""

CLAIM = """
INSERT INTO rocketmq_inbox (consumer_group, topic, message_id)
VALUES (%(group)s, %(topic)s, %(message_id)s)
ON CONFLICT DO NOTHING
RETURNING 1
"""


class CommitChecker(TransactionChecker):
    """The local transaction of every message this example sends committed."""

    def check(self, message: Message) -> TransactionResolution:
        return TransactionResolution.COMMIT


def process(database_url: str, message: Message) -> bool:
    """The message's effect and its inbox row in one transaction; False: a duplicate."""
    key = {"group": CONSUMER_GROUP, "topic": message.topic, "message_id": message.message_id}
    with psycopg.connect(database_url) as conn:  # BEGIN; COMMIT when the block ends
        if conn.execute(CLAIM, key).fetchone() is None:
            return False  # processed before: nothing to do but ack
        conn.execute(
            "INSERT INTO example_orders (message_id, body) VALUES (%s, %s)",
            (message.message_id, message.body.decode()),
        )
        return True


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: rocketmq_inbox_consumer.py HOST:PORT DATABASE_URL", file=sys.stderr)
        return 2
    endpoint, database_url = argv
    with psycopg.connect(database_url) as conn:
        conn.execute(SCHEMA)
    configuration = ClientConfiguration(endpoint, Credentials())
    consumer = SimpleConsumer(
        configuration, CONSUMER_GROUP, {TOPIC: FilterExpression("*")}, await_duration=2
    )
    producer = Producer(configuration, topics=(TOPIC,), checker=CommitChecker())
    consumer.startup()
    producer.startup()
    try:
        consumer.receive(16, 30)  # subscribes the group before anything is sent
        for n in range(1, ORDERS + 1):
            message = Message()
            message.topic = TOPIC
            message.body = f"order {n}".encode()
            transaction = producer.begin_transaction()
            producer.send(message, transaction)
            transaction.commit()

        acked: set[str] = set()
        crashed_once = False
        deadline = time.monotonic() + RECEIVE_SECONDS
        while len(acked) < ORDERS and time.monotonic() < deadline:
            for received in consumer.receive(16, 30):
                body, attempt = received.body.decode(), received.delivery_attempt
                if process(database_url, received):
                    print(f"processed {body!r} (delivery attempt {attempt})")
                else:
                    print(f"skipped {body!r}, a duplicate (delivery attempt {attempt})")
                if body == "order 1" and not crashed_once:
                    # Committed, not acked: as if the consumer died here. The
                    # message comes back when its invisible duration ends.
                    crashed_once = True
                    consumer.change_invisible_duration(received, 1)
                    continue
                consumer.ack(received)  # after the commit
                acked.add(received.message_id)
        if len(acked) < ORDERS:
            print(f"only {len(acked)} of {ORDERS} acked within {RECEIVE_SECONDS:g} s")
            return 1
        print(f"all {ORDERS} orders recorded once")
        return 0
    finally:
        producer.shutdown()
        consumer.shutdown()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
