"""The producers' RPCs: SendMessage (normal, FIFO, delay and half messages),
EndTransaction and RecallMessage.

A transactional message's producer group is its topic (`convert.producer_group_of`):
the token must be allowed to produce for that group, and ending the
transaction names the same group.
"""

from __future__ import annotations

import asyncio
from typing import Any

from coordinator.core.transactions import recall_topic
from coordinator.domain.access import Principal
from coordinator.domain.errors import CoordinatorError, InvalidMessage
from coordinator.domain.messages import EndRequest, SendResult
from coordinator.grpc import convert
from coordinator.grpc.calls import DoorPart, answered, caller_of, overall, topic_of
from coordinator.grpc.status import DoorError, error_status, status


class Producing(DoorPart):
    """SendMessage and EndTransaction, each a thin call into the core."""

    @answered("SendMessageResponse")
    async def SendMessage(self, request: Any, context: Any) -> Any:
        caller = caller_of(context, self.authenticator)
        if not request.messages:
            raise InvalidMessage("send at least one message")
        if len(request.messages) > self.settings.max_batch_size:
            raise InvalidMessage(
                f"at most {self.settings.max_batch_size} messages per send, "
                f"got {len(request.messages)}"
            )
        if len(request.messages) == 1:
            # What the clients send: no task per message for gather to wrap.
            entries = [await self._send_one(caller.principal, request.messages[0])]
        else:
            entries = await asyncio.gather(
                *(self._send_one(caller.principal, message) for message in request.messages)
            )
        top = overall(self.stubs, entries, "some messages were not stored")
        return self.stubs.service.SendMessageResponse(status=top, entries=entries)

    async def _send_one(self, principal: Principal, message: Any) -> Any:
        entry = self.stubs.service.SendResultEntry
        try:
            topic_of(message.topic)
            incoming = convert.incoming(self.stubs, message, self.settings)
            principal.require_produce(incoming.message.topic, incoming.message.producer_group)
            transactions = self.core.transactions
            store = transactions.prepare if incoming.transactional else transactions.send
            result: SendResult = await store(incoming.message)
        except CoordinatorError as error:
            return entry(
                status=error_status(self.stubs, error),
                message_id=message.system_properties.message_id,
            )
        return entry(
            status=status(self.stubs, "OK", "stored" if result.created else "stored before"),
            message_id=result.message_id,
            transaction_id=result.transaction_id or "",
            offset=result.offset,
            recall_handle=result.recall_handle or "",
        )

    @answered("EndTransactionResponse")
    async def EndTransaction(self, request: Any, context: Any) -> Any:
        caller = caller_of(context, self.authenticator)
        definition = self.stubs.definition
        group = convert.producer_group_of(topic_of(request.topic))
        caller.principal.require_producer_group(group)
        if not request.transaction_id:
            raise DoorError(
                "INVALID_TRANSACTION_ID", "give the transaction id that SendMessage returned"
            )
        result = await self.core.transactions.end(
            EndRequest(
                transaction_id=request.transaction_id,
                producer_group=group,
                resolution=convert.resolution_of(self.stubs, request.resolution),
                from_check=request.source == definition.SOURCE_SERVER_CHECK,
                message_id=request.message_id or None,
            )
        )
        said = result.state.value if result.changed else f"{result.state.value} (unchanged)"
        return self.stubs.service.EndTransactionResponse(status=status(self.stubs, "OK", said))

    @answered("RecallMessageResponse")
    async def RecallMessage(self, request: Any, context: Any) -> Any:
        caller = caller_of(context, self.authenticator)
        topic = topic_of(request.topic)
        if not request.recall_handle:
            raise InvalidMessage("give the recall handle that SendMessage returned")
        # Produce permission on the handle's topic, which must be the request's.
        caller.principal.require_produce(recall_topic(request.recall_handle), None)
        result = await self.core.transactions.recall(request.recall_handle, topic=topic)
        said = "recalled" if result.changed else "recalled before"
        return self.stubs.service.RecallMessageResponse(
            status=status(self.stubs, "OK", said), message_id=result.message_id
        )
