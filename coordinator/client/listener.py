"""The producer's callbacks (RocketMQ's TransactionListener), sync and asyncio."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from coordinator.client.message import LocalTransactionState, Message


class TransactionListener(ABC):
    @abstractmethod
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState | None:
        """Run the local transaction after the half message is stored.

        Returning None or raising means UNKNOWN: the coordinator checks back.
        """

    @abstractmethod
    def check_local_transaction(self, msg: Message) -> LocalTransactionState | None:
        """Answer a check-back: did the local transaction of `msg` commit?"""


class AsyncTransactionListener(ABC):
    @abstractmethod
    async def execute_local_transaction(
        self, msg: Message, arg: Any
    ) -> LocalTransactionState | None: ...

    @abstractmethod
    async def check_local_transaction(self, msg: Message) -> LocalTransactionState | None: ...
