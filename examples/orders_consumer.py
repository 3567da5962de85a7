"""Consumes "order created" messages: only orders that were committed arrive.

python examples/orders_consumer.py [--endpoint URL] [--seconds 30]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from coordinator.client import ConsumeResult, PushConsumer, ReceivedMessage

GROUP = "invoicing"


def printing_listener(
    out: Callable[[str], None] = print,
) -> Callable[[ReceivedMessage], ConsumeResult]:
    def on_order(message: ReceivedMessage) -> ConsumeResult:
        order_id, customer, amount_cents = message.text.split()
        out(f"invoice {order_id} for {customer}: {int(amount_cents) / 100:.2f}")
        return ConsumeResult.SUCCESS

    return on_order


def main() -> None:
    parser = argparse.ArgumentParser(description="Invoice committed orders.")
    parser.add_argument("--endpoint", default="http://127.0.0.1:8080")
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    with PushConsumer(GROUP, {"orders": "created"}, printing_listener(), args.endpoint):
        time.sleep(args.seconds)


if __name__ == "__main__":
    main()
