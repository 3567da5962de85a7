"""Consumes "order created" messages: only orders that were committed arrive.

From the repository's root, with the coordinator running:

    .venv/bin/python examples/orders_consumer.py [--endpoint URL] [--seconds 30]

An order message's body is `<order id> <customer> <amount in cents>`, as
examples/orders_service.py sends it. Any other body on the topic and tag
(the README's tour sends "order 1001 created") is logged and acked: no retry
would make it readable, and failing it would only send it round its
redeliveries into the dead letters.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from typing import NamedTuple

from coordinator.client import ConsumeResult, PushConsumer, ReceivedMessage

GROUP = "invoicing"
log = logging.getLogger("orders_consumer")


class Order(NamedTuple):
    order_id: str
    customer: str
    amount_cents: int


def parse_order(body: bytes) -> Order | None:
    """The order an "order created" body describes; None if it is not one."""
    try:
        order_id, customer, amount = body.decode().split()
        return Order(order_id, customer, int(amount))
    except ValueError:  # not UTF-8, not three words, or no amount
        return None


def printing_listener(
    out: Callable[[str], None] = print,
) -> Callable[[ReceivedMessage], ConsumeResult]:
    def on_order(message: ReceivedMessage) -> ConsumeResult:
        order = parse_order(message.body)
        if order is None:
            log.warning(
                "skipped message %s: its body is not an order (%r)",
                message.message_id,
                message.body[:100],
            )
            return ConsumeResult.SUCCESS
        out(f"invoice {order.order_id} for {order.customer}: {order.amount_cents / 100:.2f}")
        return ConsumeResult.SUCCESS

    return on_order


def main() -> None:
    parser = argparse.ArgumentParser(description="Invoice committed orders.")
    parser.add_argument("--endpoint", default="http://127.0.0.1:8080")
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    with PushConsumer(GROUP, {"orders": "created"}, printing_listener(), args.endpoint):
        time.sleep(args.seconds)


if __name__ == "__main__":
    main()
