"""Delivery of committed messages to consumer groups (RocketMQ 5 SimpleConsumer).

Committed messages become deliveries in the transaction that commits them
(the statement trigger messages_changed on messages). A receive claims a group's oldest
available deliveries with FOR UPDATE SKIP LOCKED, makes them invisible to the
rest of the group for an invisible duration, counts the attempt and issues a
fresh receipt handle. An ack deletes the delivery; one not acked in time is
received again with its attempt count, until the subscription's
max_delivery_attempts is used up and it moves to the group's dead letters.

`subscriptions` keeps who receives what, `receiving` hands messages out and
takes them back (ack, invisible durations, burial), `dead_letters` lists and
requeues what was buried; `service.Delivery` is the one face callers use.
"""

from coordinator.core.delivery.service import Delivery

__all__ = ["Delivery"]
