"""The producers' RPCs: SendMessage (normal, FIFO, delay and half messages),
EndTransaction and RecallMessage.

A transactional message's producer group is its topic (`convert.producer_group_of`):
the token must be allowed to produce for that group, and ending the
transaction names the same group.

SendMessage looks at each message's metadata, then checks the sender's
permission, and only then unpacks a GZIP body (`bodies.py`), one message
after the other so that one budget bounds what the request unpacks; the
messages accepted are then stored together.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from coordinator.core.transactions import recall_topic
from coordinator.domain.access import Principal
from coordinator.domain.errors import CoordinatorError, InvalidMessage
from coordinator.domain.messages import EndRequest, SendResult
from coordinator.grpc import bodies, convert
from coordinator.grpc.calls import DoorPart, answered, caller_of, overall, topic_of
from coordinator.grpc.status import DoorError, error_status, status


class Producing(DoorPart):
    """SendMessage and EndTransaction, each a thin call into the core."""

    @answered("SendMessageResponse")
    async def SendMessage(self, request: Any, context: Any) -> Any:
        caller = caller_of(context, self.authenticator)
        if not request.messages:
            raise InvalidMessage("send at least one message")
        if len(request.messages) > self.config.max_batch_size:
            raise InvalidMessage(
                f"at most {self.config.max_batch_size} messages per send, "
                f"got {len(request.messages)}"
            )
        # One after the other, so that the request's budget of unpacked bytes
        # bounds what it holds; then stored together.
        budget = bodies.RequestBudget(self.config.max_request_bytes)
        sent = list(request.messages)
        accepted = [await self._accept(caller.principal, message, budget) for message in sent]
        if len(sent) == 1:
            # What the clients send: no task per message for gather to wrap.
            entries = [await self._store(sent[0], accepted[0])]
        else:
            entries = await asyncio.gather(*map(self._store, sent, accepted))
        top = overall(self.stubs, entries, "some messages were not stored")
        return self.stubs.service.SendMessageResponse(status=top, entries=entries)

    async def _accept(
        self, principal: Principal, message: Any, budget: bodies.RequestBudget
    ) -> convert.Incoming | CoordinatorError:
        """The message to store, or why it is refused.

        The sender's permission is checked on what the message's metadata names
        before its body is unpacked: a GZIP body costs work to look at.
        """
        try:
            topic_of(message.topic)
            incoming = convert.incoming(self.stubs, message, self.config)
            principal.require_produce(incoming.message.topic, incoming.message.producer_group)
            if not incoming.gzipped:
                budget.take(len(incoming.message.body))
                return incoming
            body = await bodies.gunzip(incoming.message.body, self.config.max_body_bytes, budget)
            return dataclasses.replace(
                incoming, message=dataclasses.replace(incoming.message, body=body)
            )
        except CoordinatorError as error:
            return error

    async def _store(self, sent: Any, accepted: convert.Incoming | CoordinatorError) -> Any:
        """The result entry of one sent message."""
        if isinstance(accepted, CoordinatorError):
            return self._refused(sent, accepted)
        transactions = self.core.transactions
        store = transactions.prepare if accepted.transactional else transactions.send
        try:
            result: SendResult = await store(accepted.message)
        except CoordinatorError as error:
            return self._refused(sent, error)
        entry = self.stubs.service.SendResultEntry
        return entry(
            status=status(self.stubs, "OK", "stored" if result.created else "stored before"),
            message_id=result.message_id,
            transaction_id=result.transaction_id or "",
            offset=result.offset,
            recall_handle=result.recall_handle or "",
        )

    def _refused(self, sent: Any, error: CoordinatorError) -> Any:
        return self.stubs.service.SendResultEntry(
            status=error_status(self.stubs, error), message_id=sent.system_properties.message_id
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
